"""A driver killed (SIGKILL) at many points of a run, then run again: the database and MLflow end
exactly as after one uninterrupted run. Jobs the dead driver held are taken over at once (its
process is gone), its MLflow runs are ended as killed, nothing stays running, nothing is doubled."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import with_mlflow_store
from mlflow.tracking import MlflowClient
from support.paths import SUPPORT

from db.store import Store

pytestmark = pytest.mark.slow  # tests/README.md: markers

SCRIPT = SUPPORT / "kill_driver.py"
KILLS = [("claim", 1), ("job", 4), ("mlflow-run", 3), ("record", 2), ("done", 11)]


TEMPLATE: list[Path] = []  # the session's empty MLflow store, copied into each new work directory


@pytest.fixture(autouse=True, scope="module")
def _template(mlflow_template):
    TEMPLATE.append(mlflow_template)


def drive(workdir: Path, *kill: str) -> int:
    with_mlflow_store(workdir, TEMPLATE[0])
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(workdir), *kill], capture_output=True, text=True, timeout=300
    ).returncode


def snapshot(workdir: Path) -> dict:
    """What a run leaves, less what differs between runs by nature (paths, ids, timings, attempts)."""

    def clean(value):
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if k not in ("files_uri",)}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    with Store(f"sqlite:///{workdir / 'specfleet.db'}") as store:
        jobs = store.jobs()
        out = {
            "jobs": sorted((j["name"], j["status"]) for j in jobs),
            "results": {j["name"]: clean(store.finished_result(j["job_hash"])) for j in jobs},
            "best": sorted(
                (r["drafter"], r["version"], r["active"], r["depth"], r["accept_len"], r["speedup"])
                for r in store.best(history=True)
            ),
            "curves": sorted(
                (r["drafter"], r["condition"], r["depth"], r["accept_len"]) for r in store.curves(category=None)
            ),
            "speedups": sorted((r["drafter"], r["depth"], r["tokens_per_s"]) for r in store.speedup_checks()),
            "diagnostics": sorted((r["drafter"], r["name"], r["depth"], r["value"]) for r in store.diagnostics()),
        }
        hashes = {j["job_hash"]: j["name"] for j in jobs}
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    finished: dict[str, list] = {}
    for r in runs:
        name = hashes.get(r.data.tags.get("specfleet.job_hash"), "parent")
        assert r.info.status in ("FINISHED", "KILLED", "FAILED"), (name, r.info.status)  # none left running
        if r.info.status == "FINISHED":
            finished.setdefault(name, []).append(sorted(r.data.metrics.items()))
    out["mlflow"] = finished  # one finished run per job (and the parent), with its metrics
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    workdir = tmp_path_factory.mktemp("uninterrupted")
    assert drive(workdir) == 0
    return snapshot(workdir)


@pytest.mark.parametrize("where,n", KILLS, ids=[f"{w}-{n}" for w, n in KILLS])
def test_killed_and_rerun_equals_uninterrupted(tmp_path, reference, where, n):
    assert drive(tmp_path, where, str(n)) == -9  # killed where asked
    assert drive(tmp_path) == 0
    after = snapshot(tmp_path)
    assert after == reference
    assert all(len(metrics) == 1 for metrics in after["mlflow"].values())
    assert not list((tmp_path / "unrecorded").glob("*.json"))  # every kept result recorded, or dropped once it was


@pytest.mark.parametrize("service,n", [("db-down", 4), ("mlflow-down", 6)])
def test_results_finished_while_a_store_was_down_are_recorded_by_the_next_run(tmp_path, reference, service, n):
    """The database or MLflow goes away mid-run for longer than writes wait: the run ends with the
    store's error, the results that finished stay on disk, and the next run records them without
    running them again; the stores end as after an uninterrupted run."""
    with_mlflow_store(tmp_path, TEMPLATE[0])
    first = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), service, str(n)], capture_output=True, text=True, timeout=300
    )
    assert first.returncode == 1 and "unavailable for 60 s" in first.stderr
    kept = list((tmp_path / "unrecorded").glob("*.json"))
    assert kept  # the job whose recording met the outage, and any other that had finished by then
    assert drive(tmp_path) == 0
    assert not list((tmp_path / "unrecorded").glob("*.json"))
    ran = (tmp_path / "ran.log").read_text().splitlines()
    assert len(ran) == len(set(ran)) == 11  # every job ran once over the two runs: the kept one was not rerun
    assert snapshot(tmp_path) == reference


def test_the_uninterrupted_run_is_complete(reference):
    assert len(reference["jobs"]) == 11 and {s for _, s in reference["jobs"]} == {"done"}
    assert len(reference["mlflow"]) == 12  # eleven jobs and the parent run


def test_two_drivers_at_once_run_each_job_once(tmp_path, reference):
    """The second driver waits for the jobs the first holds, then reuses them: nothing runs twice,
    nothing finished is overwritten, and the stores equal one uninterrupted run's."""
    with_mlflow_store(tmp_path, TEMPLATE[0])
    procs = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    assert [p.wait(timeout=300) for p in procs] == [0, 0], [p.stderr.read()[-1500:] for p in procs]
    with Store(f"sqlite:///{tmp_path / 'specfleet.db'}") as store:
        assert {j["name"]: j["attempts"] for j in store.jobs()} == {name: 1 for name, _ in reference["jobs"]}
    assert snapshot(tmp_path) == reference
