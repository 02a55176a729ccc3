"""A driver that kills itself (SIGKILL: no cleanup of any kind) at a chosen point of a run.

    python kill_driver.py WORKDIR [WHERE N]

runs tests/pipeline/run/test_executor.py's SPEC in process (LocalCluster, the fake typed runner) against the
SQLite database and MLflow store in WORKDIR. WHERE N kills the process at the N-th (from 1):
  job          a job starting on the cluster
  claim        claim committed, before anything runs
  mlflow-run   job MLflow run created, not yet marked running in the database
  record       recording begun: MLflow written, the database not yet marked done
  done         the database just marked a job done
or, instead of a kill, a service that goes away for good at that point (the driver then ends
with the service's error, after its retries, as a real one would):
  db-down      the database, from the N-th job marked done on
  mlflow-down  MLflow, from the N-th job MLflow run started on
Without WHERE the run goes to the end. Every job the cluster runs is listed in WORKDIR/ran.log.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
from pathlib import Path

import yaml
from rich.console import Console

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS.parent), str(TESTS)]  # the repository (for `tests.`) and the tests (for conftest)
from db.errors import StoreError  # noqa: E402
from db.store import Store  # noqa: E402
from pipeline.errors import UserError  # noqa: E402
from pipeline.plan import build_plan  # noqa: E402
from pipeline.run.executor import run_plan  # noqa: E402
from pipeline.run.local_cluster import LocalCluster  # noqa: E402
from pipeline.run.tracking import Tracker  # noqa: E402
from pipeline.spec import parse_spec  # noqa: E402
from tests.pipeline.run.test_executor import SPEC, answer  # noqa: E402


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
        with open(workdir / "ran.log", "a") as log:
            log.write(f"{kind} {hashlib.sha256(json.dumps(config.hashed(), sort_keys=True).encode()).hexdigest()}\n")
        return answer(kind, config, inputs, **kw)

    store = Store(f"sqlite:///{workdir / 'specfleet.db'}")
    tracker = Tracker(f"sqlite:///{workdir / 'mlflow.db'}", str(workdir / "artifacts"))
    for name, point, after in (
        ("claim", "claim", True),
        ("mark_done", "record", False),
        ("mark_done", "done", True),
        ("mark_running", "mlflow-run", False),
    ):
        _wrap(store, name, point, after, tick)
    if where == "db-down":
        _goes_down(
            store,
            "mark_done",
            n,
            ("claim", "renew", "mark_running", "mark_done", "mark_failed"),
            StoreError("mark_done: database sqlite:///specfleet.db unavailable for 60 s"),
        )
    if where == "mlflow-down":
        _goes_down(
            tracker,
            "start_job",
            n,
            ("start_job", "log_all", "log_dict", "log_text", "log_artifact", "end", "end_abandoned"),
            UserError("MLflow tracking store sqlite:///mlflow.db unavailable for 60 s"),
        )
    spec = parse_spec(yaml.safe_dump(SPEC))
    summary = run_plan(
        build_plan(spec, "v1"),
        spec=spec,
        spec_text="",
        store=store,
        tracker=tracker,
        workdir=workdir,
        connect=lambda: LocalCluster(runner),
        console=Console(quiet=True),
    )
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


def _goes_down(service, trigger: str, n: int, calls: tuple[str, ...], error: Exception) -> None:
    """From the n-th call of `trigger` on, every one of `calls` raises `error`."""
    state = {"count": 0, "down": False}
    for name in calls:
        original = getattr(service, name)

        def wrapped(*args, _original=original, _name=name, **kwargs):
            if _name == trigger:
                state["count"] += 1
                state["down"] = state["down"] or state["count"] >= n
            if state["down"]:
                raise error
            return _original(*args, **kwargs)

        setattr(service, name, wrapped)


if __name__ == "__main__":
    main()
