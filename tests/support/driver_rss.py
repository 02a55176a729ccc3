"""`python tests/support/driver_rss.py OUT ARGS...`: run `specfleet ARGS...` in this process, then write the
process's own peak resident memory in bytes to OUT (its Ray workers and servers are other processes)."""

from __future__ import annotations

import resource
import sys
from pathlib import Path

from pipeline.cli.main import app

if __name__ == "__main__":
    code = 0
    try:
        app(sys.argv[2:])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:  # ru_maxrss is in kilobytes on Linux
        Path(sys.argv[1]).write_text(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))
    sys.exit(code)
