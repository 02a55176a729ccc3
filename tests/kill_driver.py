"""A driver that kills itself (SIGKILL: no cleanup of any kind) at a chosen point of a run.

    python kill_driver.py WORKDIR [WHERE N]

runs tests/test_executor.py's SPEC in process (LocalCluster, the fake typed runner) against the
SQLite database and MLflow store in WORKDIR. WHERE N kills the process at the N-th (from 1):
  job          a job starting on the cluster
  claim        claim committed, before anything runs
  mlflow-run   job MLflow run created, not yet marked running in the database
  record       recording begun: MLflow written, the database not yet marked done
  done         the database just marked a job done
Without WHERE the run goes to the end.
"""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import yaml
from rich.console import Console

sys.path.insert(0, str(Path(__file__).parent))
from test_executor import SPEC, answer  # noqa: E402

from db.store import Store  # noqa: E402
from pipeline.executor import run_plan  # noqa: E402
from pipeline.local import LocalCluster  # noqa: E402
from pipeline.plan import build_plan  # noqa: E402
from pipeline.spec import parse_spec  # noqa: E402
from pipeline.tracking import Tracker  # noqa: E402


def main() -> None:
    workdir = Path(sys.argv[1])
    where, n = (sys.argv[2], int(sys.argv[3])) if len(sys.argv) > 3 else (None, 0)
    count = {"n": 0}

    def tick(point: str) -> None:
        if point == where:
            count["n"] += 1
            if count["n"] == n:
                os.kill(os.getpid(), signal.SIGKILL)

    def runner(kind, config, inputs, **kw):
        tick("job")
        return answer(kind, config, inputs, **kw)

    store = Store(f"sqlite:///{workdir / 'specfleet.db'}")
    tracker = Tracker(f"sqlite:///{workdir / 'mlflow.db'}", str(workdir / "artifacts"))
    for name, point, after in (("claim", "claim", True), ("mark_done", "record", False), ("mark_done", "done", True),
                               ("mark_running", "mlflow-run", False)):
        _wrap(store, name, point, after, tick)
    spec = parse_spec(yaml.safe_dump(SPEC))
    summary = run_plan(build_plan(spec, "v1"), spec=spec, spec_text="", store=store, tracker=tracker,
                       workdir=workdir, connect=lambda: LocalCluster(runner), console=Console(quiet=True))
    store.close()
    sys.exit(1 if summary.failed else 0)


def _wrap(store, name: str, point: str, after: bool, tick) -> None:
    original = getattr(store, name)

    def wrapped(*args, **kwargs):
        if not after:
            tick(point)
        out = original(*args, **kwargs)
        if after:
            tick(point)
        return out

    setattr(store, name, wrapped)


if __name__ == "__main__":
    main()
