"""`python -m pipeline` is the `specfleet` command."""
from pipeline.cli import main

main()
