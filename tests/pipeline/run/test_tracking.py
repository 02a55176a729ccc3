"""MLflow logging into a temporary SQLite store: runs are found again, curves use step = depth."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from db.store import Store
from pipeline.core.contracts import DiagnosticValue, Measured, MeasuredCurve
from pipeline.core.types import Curve
from pipeline.errors import UserError
from pipeline.plan import Job
from pipeline.run.record import Recording, finished, record_measured
from pipeline.run.tracking import TAG_JOB, Tracker, fit, flatten


def test_flatten_nested_params():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": "x"}) == {"a.b": "1", "a.c": "[1, 2]", "d": "x"}


def test_parent_and_child_runs_with_curve(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, str(tmp_path / "artifacts"))
    exp_id, parent = tracker.parent_run(experiment="specfleet/t", spec_hash="abc", params={"seed": 1}, tags={})
    assert tracker.parent_run(experiment="specfleet/t", spec_hash="abc", params={"seed": 1}, tags={}) == (
        exp_id,
        parent,
    )
    _, other = tracker.parent_run(experiment="specfleet/t", spec_hash="def", params={"seed": 2}, tags={})
    assert other != parent

    job = Job("measure_curve", "measure_curve t/d", None, (), "h" * 64, 1, 0, "t", "d")
    run_id = tracker.start_job(
        exp_id,
        parent,
        job_hash=job.hash,
        kind=job.kind,
        name=job.name,
        params={"evaluation": {"max_depth": 3}},
        tags={},
    )
    curve = Curve(
        "default",
        0.0,
        10,
        (0.8, 0.5, 0.5),
        (0.8, 0.4, 0.2),
        (1.0, 1.8, 2.2, 2.4),
        decode_accept_len=(1.0, 1.7, 2.0, 2.1),
    )
    other = Curve("no_template", 0.0, 10, (0.5, 0.5, 0.5), (0.5, 0.25, 0.125), (1.0, 1.5, 1.75, 1.875))
    diagnostics = tuple(
        DiagnosticValue(condition="default", temperature=0.0, depth=k, name="rms", value=1.0 + k) for k in (1, 2, 3)
    )
    measured = Measured(
        curves=tuple(MeasuredCurve(curve=k, per_prompt=(), walks=()) for k in (curve, other)), diagnostics=diagnostics
    )
    store = Store(f"sqlite:///{tmp_path / 'specfleet.db'}")
    store.link_job(
        store.ensure_experiment(name="t", spec_hash="abc", spec_yaml="", code_version="v"),
        job_hash=job.hash,
        kind=job.kind,
        name=job.name,
        config={},
    )
    record_measured(job, measured, Recording(tracker, store, run_id, 1, "abc", "v", {}))
    assert finished(store, "measure_curve", job.hash) == measured  # the typed result comes back as it went in
    assert [r["survival"] for r in store.curves(condition="default")] == [0.8, 0.4, 0.2]
    assert [r["value"] for r in store.diagnostics(condition="default")] == [2.0, 3.0, 4.0]
    store.close()
    client = MlflowClient(uri)
    assert client.get_run(run_id).info.status == "RUNNING"
    tracker.end(run_id, ok=True)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags[TAG_JOB] == job.hash and run.data.tags["mlflow.parentRunId"] == parent
    assert run.data.params["evaluation.max_depth"] == "3"
    acc = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "accept_len"))
    assert acc == [(0, 1.0), (1, 1.8), (2, 2.2), (3, 2.4)]
    # metrics carry the run's real start time (not 1970), one per run: a value logged again is the same point
    assert {m.timestamp for m in client.get_metric_history(run_id, "accept_len")} == {run.info.start_time}
    assert run.info.start_time > 1_700_000_000_000
    Tracker(uri).log_all(run_id, series={"accept_len": [(1, 1.8)]})  # a record retried by another driver
    assert len(client.get_metric_history(run_id, "accept_len")) == 4
    surv = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "survival"))
    assert surv == [(1, 0.8), (2, 0.4), (3, 0.2)]
    other_acc = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "accept_len/no_template/T0"))
    assert other_acc == [(0, 1.0), (1, 1.5), (2, 1.75), (3, 1.875)]
    rms = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "rms/default/T0"))
    assert rms == [(1, 2.0), (2, 3.0), (3, 4.0)]
    walk = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "decode_accept_len"))
    assert walk == [(0, 1.0), (1, 1.7), (2, 2.0), (3, 2.1)]
    assert client.list_artifacts(run_id) == []  # no figure drawn per job: MLflow charts the series


def test_names_longer_than_mlflow_keeps_land_cut_and_apart(tmp_path):
    """A prompt category may be 255 characters, and a metric named for it is longer than the 250
    MLflow keeps: such names land cut to 250, ending in a digest, and two that share their head
    stay two metrics. Run names and param keys are fitted the same way."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, str(tmp_path / "artifacts"))
    exp_id, parent = tracker.parent_run(experiment="specfleet/t", spec_hash="abc", params={}, tags={})
    category = "c" * 254
    run_id = tracker.start_job(
        exp_id,
        parent,
        job_hash="h" * 64,
        kind="select_depth",
        name="select_depth " + "t" * 150 + "/" + "d" * 150,
        params={"p" * 200: {"q" * 100: 1}},
        tags={},
    )
    names = [f"accept_len/default/T0/{category}{end}" for end in "ab"]
    tracker.log_all(
        run_id,
        metrics={f"depth/{category}a": 3},
        series={name: [(0, 1.0), (1, 1.5 + i)] for i, name in enumerate(names)},
        tags={"t" * 300: "v"},
    )
    run = MlflowClient(uri).get_run(run_id)
    keys = sorted(run.data.metrics)
    assert len(keys) == 3 and all(len(k) == 250 and k[-13] == "-" for k in keys), keys
    assert [fit(n) for n in names] == [k for k in keys if k.startswith("accept_len")]
    client = MlflowClient(uri)
    assert [m.value for m in client.get_metric_history(run_id, fit(names[1]))] == [1.0, 2.5]
    assert run.data.metrics[fit(f"depth/{category}a")] == 3
    assert run.info.run_name == fit("select_depth " + "t" * 150 + "/" + "d" * 150) and len(run.info.run_name) == 250
    assert list(run.data.params) == [fit("p" * 200 + "." + "q" * 100)] and run.data.tags[fit("t" * 300)] == "v"
    assert fit("short") == "short" and fit("x" * 250) == "x" * 250


def test_what_the_tracking_store_refuses_is_one_line_naming_the_store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, str(tmp_path / "artifacts"))
    exp_id, parent = tracker.parent_run(experiment="specfleet/t", spec_hash="abc", params={}, tags={})
    with pytest.raises(UserError) as refused:
        tracker.log_all(parent, metrics={"depth/a#b": 1.0})  # '#' is not a character MLflow names take
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"MLflow tracking store {uri} refused log_batch: "), message
    assert "a#b" in message
