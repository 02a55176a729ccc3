"""The orchestration benchmark runs every select job in each mode and its numbers add up.

Only the direct loop and the in-process executor run here: starting a local Ray cluster takes
20 s and more on a small machine, beyond this test's budget (the Ray mode is run by hand, with
`python -c` on pipeline.bench.orchestration, and by whoever calls the benchmark).
"""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

import pipeline.core.select
from db.store import Store
from pipeline.bench.orchestration import orchestration_bench
from pipeline.core import contracts as c
from tests.pipeline.run.test_executor import COST, CURVE

JOBS = 6


def test_every_mode_runs_every_job_and_the_overheads_are_per_job_differences(tmp_path, monkeypatch):
    calls = []
    real = pipeline.core.select.run

    def counted(config, inputs, **kw):  # the direct loop and the in-process cluster run in this process
        calls.append(config.seed)
        return real(config, inputs, **kw)

    monkeypatch.setattr(pipeline.core.select, "run", counted)
    lines = []
    out = orchestration_bench(
        tmp_path,
        jobs=JOBS,
        measured=c.Measured(curves=(c.MeasuredCurve(curve=CURVE, per_prompt=(), walks=()),)),
        profiled=c.Profiled(cost=COST),
        log=lines.append,
        ray=False,
    )
    assert sorted(calls) == sorted([*range(JOBS)] * 2)  # each seed once directly, once through the executor
    assert len(lines) == 2 and all(line.startswith("orchestration: ") for line in lines)

    (local,) = tmp_path.glob("local-*")  # the in-process executor's own work directory
    store = Store(f"sqlite:///{local / 'specfleet.db'}")
    try:
        jobs = store.jobs()
    finally:
        store.close()
    selects = [j for j in jobs if j["kind"] == "select_depth"]
    assert len(selects) == JOBS and {(j["status"], j["attempts"]) for j in selects} == {("done", 1)}
    assert {j["kind"]: j["status"] for j in jobs if j["kind"] != "select_depth"} == {
        "measure_curve": "done",
        "profile_cost": "done",
    }  # recorded before the timed run, which reused them
    client = MlflowClient(f"sqlite:///{local / 'mlflow.db'}")
    runs = [
        r
        for e in client.search_experiments()
        for r in client.search_runs([e.experiment_id], filter_string="tags.`specfleet.kind` = 'select_depth'")
    ]
    assert {r.data.tags["specfleet.job_hash"] for r in runs} == {j["job_hash"] for j in selects}
    assert len(runs) == JOBS and {r.info.status for r in runs} == {"FINISHED"}
    assert not list(tmp_path.glob("ray-*"))

    assert out["jobs"] == JOBS
    for mode in ("direct", "local"):
        assert out[f"{mode}_s"] > 0
        assert out[f"{mode}_ms_per_job"] == pytest.approx(out[f"{mode}_s"] * 1000 / JOBS)
    overhead = out["local_ms_per_job"] - out["direct_ms_per_job"]
    assert out["local_overhead_ms"] == pytest.approx(overhead) and overhead > 0
    assert out["local_overhead_share"] == pytest.approx(overhead / out["direct_ms_per_job"])
    assert all(out[k] is None for k in out if k.startswith("ray_"))
