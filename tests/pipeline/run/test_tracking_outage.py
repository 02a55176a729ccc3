"""MLflow as a shared service: an `mlflow server` on 127.0.0.1 backed by PostgreSQL, reached through a
proxy the test takes down. Calls wait out the outage and log once; a longer one is one clear error."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import running_mlflow_server
from sqlalchemy import make_url
from support.databases import fresh_pg_database
from support.tcp_proxy import TcpProxy

from pipeline.errors import UserError
from pipeline.run.tracking import Tracker

pytestmark = pytest.mark.postgres  # the MLflow server and the run keep their data in PostgreSQL


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """(proxy, tracking URI through it): an MLflow server whose store is a fresh PostgreSQL database."""
    artifacts = tmp_path_factory.mktemp("mlflow-artifacts")
    for db in fresh_pg_database():
        with running_mlflow_server(
            "--backend-store-uri",
            make_url(db).render_as_string(hide_password=False),
            "--default-artifact-root",
            str(artifacts),
        ) as port:
            proxy = TcpProxy(port)
            yield proxy, f"http://127.0.0.1:{proxy.port}"
            proxy.down()


@pytest.mark.slow
def test_a_tracking_outage_is_ridden_out_and_logged_once(mlflow_server, caplog):
    proxy, uri = mlflow_server
    tracker = Tracker(uri, retry_s=30)
    tracker.check()
    exp, parent = tracker.parent_run(experiment="outage", spec_hash="s1", params={"a": 1}, tags={})
    run = tracker.start_job(exp, parent, job_hash="j1", kind="measure_curve", name="m", params={"b": 2}, tags={})
    proxy.down()
    done = threading.Event()
    writer = threading.Thread(
        target=lambda: (tracker.log_all(run, series={"accept_len": [(1, 1.5), (2, 1.8)]}), done.set())
    )
    writer.start()
    time.sleep(2.0)
    assert not done.is_set()  # waiting for the server, not failed
    proxy.up()
    writer.join(timeout=60)
    assert done.is_set()
    tracker.end(run, ok=True)
    history = tracker.client.get_metric_history(run, "accept_len")
    assert sorted((m.step, m.value) for m in history) == [(1, 1.5), (2, 1.8)]  # once each
    assert tracker.client.get_run(run).info.status == "FINISHED"
    assert any("retrying in" in r.getMessage() for r in caplog.records)


def test_an_outage_longer_than_the_bound_is_one_error(mlflow_server):
    proxy, uri = mlflow_server
    tracker = Tracker(uri, retry_s=2)
    exp, parent = tracker.parent_run(experiment="outage-long", spec_hash="s2", params={}, tags={})
    proxy.down()
    t0 = time.monotonic()
    try:
        with pytest.raises(
            UserError, match=r"MLflow tracking store http://127.0.0.1:\d+ unavailable for 2 s"
        ) as caught:
            tracker.log_all(parent, metrics={"x": 1.0})
        assert time.monotonic() - t0 < 40 and "\n" not in str(caught.value)
    finally:
        proxy.up()


@pytest.mark.slow
def test_a_run_rides_out_a_database_and_an_mlflow_outage_mid_run(mlflow_server, tmp_path):
    """Both shared services go away together in the middle of a run for 3 s: the run waits for
    them and ends with every job run once, recorded once, and nothing failed."""
    import yaml
    from rich.console import Console
    from test_executor import SPEC, answer

    from db.store import Store
    from pipeline.plan import build_plan
    from pipeline.run.executor import run_plan
    from pipeline.run.local_cluster import LocalCluster
    from pipeline.spec import parse_spec

    mlflow_proxy, uri = mlflow_server
    for db in fresh_pg_database():
        db_proxy = TcpProxy(make_url(db).port or 5432)
        store = Store(
            make_url(db).set(host="127.0.0.1", port=db_proxy.port).render_as_string(hide_password=False), retry_s=60
        )
        tracker = Tracker(uri, retry_s=60)
        ran: list[str] = []

        def runner(kind, config, inputs, ran=ran, db_proxy=db_proxy, **kw):
            ran.append(kind)
            if len(ran) == 4:  # mid-run: both services go, and come back 3 s later
                for proxy in (db_proxy, mlflow_proxy):
                    proxy.down()
                    threading.Timer(3.0, proxy.up).start()
            return answer(kind, config, inputs, **kw)

        spec = parse_spec(yaml.safe_dump({**SPEC, "name": "ride-out"}))
        t0 = time.monotonic()
        summary = run_plan(
            build_plan(spec, "v1"),
            spec=spec,
            spec_text="",
            store=store,
            tracker=tracker,
            workdir=tmp_path,
            connect=lambda: LocalCluster(runner),
            console=Console(quiet=True),
        )
        assert time.monotonic() - t0 > 3  # it did wait for them
        assert len(summary.done) == 11 and not summary.failed and len(ran) == 11
        assert {(j["status"], j["attempts"]) for j in store.jobs()} == {("done", 1)}
        assert len(store.best()) == 2
        exp = tracker.client.get_experiment_by_name("specfleet/ride-out")
        runs = tracker.client.search_runs([exp.experiment_id])
        assert len(runs) == 12 and {r.info.status for r in runs} == {"FINISHED"}  # one per job, and the parent
        assert not list((tmp_path / "unrecorded").glob("*.json"))
        store.close()
        db_proxy.down()
