"""MLflow logging into a temporary SQLite store: runs are found again, curves use step = depth."""
from __future__ import annotations

from mlflow.tracking import MlflowClient

from pipeline.plan import Job
from pipeline.record import log_job
from pipeline.tracking import TAG_JOB, Tracker, flatten
from pipeline.types import Curve


def test_flatten_nested_params():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": "x"}) == {"a.b": "1", "a.c": "[1, 2]", "d": "x"}


def test_parent_and_child_runs_with_curve(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, str(tmp_path / "artifacts"))
    exp_id, parent = tracker.parent_run(experiment="specfleet/t", spec_hash="abc", params={"seed": 1}, tags={})
    assert tracker.parent_run(experiment="specfleet/t", spec_hash="abc", params={"seed": 1}, tags={}) == (exp_id, parent)
    _, other = tracker.parent_run(experiment="specfleet/t", spec_hash="def", params={"seed": 2}, tags={})
    assert other != parent

    job = Job("measure_curve", "measure_curve t/d", {"evaluation": {"max_depth": 3}}, (), "h" * 64, 1, 0, "t", "d")
    run_id = tracker.start_job(exp_id, parent, job_hash=job.hash, kind=job.kind, name=job.name,
                               params=job.config, tags={})
    curve = Curve("default", 0.0, 10, (0.8, 0.5, 0.5), (0.8, 0.4, 0.2), (1.0, 1.8, 2.2, 2.4))
    log_job(tracker, run_id, job, {"curve": curve.to_dict()})
    client = MlflowClient(uri)
    assert client.get_run(run_id).info.status == "RUNNING"
    tracker.end(run_id, ok=True)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags[TAG_JOB] == job.hash and run.data.tags["mlflow.parentRunId"] == parent
    assert run.data.params["evaluation.max_depth"] == "3"
    acc = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "accept_len"))
    assert acc == [(0, 1.0), (1, 1.8), (2, 2.2), (3, 2.4)]
    surv = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "survival"))
    assert surv == [(1, 0.8), (2, 0.4), (3, 0.2)]
    artifacts = [a.path for a in client.list_artifacts(run_id)]
    assert "curve.png" in artifacts
    assert (tmp_path / "artifacts").is_dir()
