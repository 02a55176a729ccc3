"""What a job says while it runs on a worker, kept for its MLflow run (`worker.log`).

A Ray worker's output otherwise goes to the node's session logs, apart from the job it belongs
to. While a job runs, its Python output (print, stderr), its log records and its warnings are
written here as well as where they went before; a job that fails carries the text on its
exception (`worker_log`), so a failure's log is kept too.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import time
import warnings

MAX_CHARS = 1_000_000  # the end of a longer log is kept


class _Tee(io.TextIOBase):
    def __init__(self, *streams):
        self.streams = streams

    def write(self, text: str) -> int:
        for s in self.streams:
            s.write(text)
        return len(text)

    def flush(self) -> None:
        for s in self.streams:
            s.flush()


@contextlib.contextmanager
def captured(label: str):
    """Yield a function that returns the log so far; output still reaches the worker's streams."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(min(level, logging.INFO) if level else logging.INFO)

    def show(message, category, filename, lineno, file=None, line=None):
        buffer.write(f"{category.__name__}: {message} ({filename}:{lineno})\n")

    t0 = time.monotonic()
    buffer.write(f"{label} started\n")
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(_Tee(sys.stdout, buffer)),
        contextlib.redirect_stderr(_Tee(sys.stderr, buffer)),
    ):
        warnings.showwarning = show
        try:
            yield lambda: buffer.getvalue()[-MAX_CHARS:]
        except BaseException as exc:
            buffer.write(f"{label} failed after {time.monotonic() - t0:.1f} s: {type(exc).__name__}: {exc}\n")
            exc.worker_log = buffer.getvalue()[-MAX_CHARS:]
            raise
        finally:
            root.removeHandler(handler)
            root.setLevel(level)
    buffer.write(f"{label} finished in {time.monotonic() - t0:.1f} s\n")
