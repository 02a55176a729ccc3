"""`python -m pipeline` is the `specfleet` command."""

from pipeline.cli.main import main

main()
