"""The `specfleet` command line: `main` holds the commands, `common` what they share, `results` the
commands that show results.
"""
