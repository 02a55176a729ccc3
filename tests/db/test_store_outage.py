"""A database that goes away mid-run and comes back: writes wait for it, land once, and say why."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import create_engine, make_url, text
from support.databases import PG_BASE_URL, fresh_pg_database
from support.tcp_proxy import TcpProxy

from db.store import Store, StoreError


@pytest.fixture()
def pg_through_proxy():
    """A fresh PostgreSQL database reached through a proxy the test can take down."""
    for url in fresh_pg_database():
        proxy = TcpProxy(make_url(PG_BASE_URL).port or 5432)
        yield make_url(url).set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False), proxy
        proxy.down()


def _add(store: Store, n: int) -> int:
    return store.add_production_config(
        target="t",
        drafter="d",
        hardware="cpu",
        condition="default",
        temperature=0.0,
        depth=1,
        accept_len=1.5,
        speedup=1.1,
        cost_ratio=0.1,
        code_version="v",
        notes=f"measurement {n}",
    )


@pytest.mark.slow
def test_writes_and_reads_ride_out_an_outage(pg_through_proxy, caplog):
    url, proxy = pg_through_proxy
    store = Store(url, retry_s=30)
    assert _add(store, 0) == 1
    proxy.down()  # the database goes away with the store's pooled connection
    done: list = []
    writer = threading.Thread(target=lambda: done.append(_add(store, 1)))
    writer.start()
    time.sleep(2.0)
    assert writer.is_alive() and not done  # still waiting for the database, not failed
    proxy.up()
    writer.join(timeout=30)
    assert done == [2]
    rows = store.best(history=True)
    assert sorted(r["notes"] for r in rows) == ["measurement 0", "measurement 1"]  # written once
    assert any("retrying in" in r.getMessage() for r in caplog.records)
    store.close()


def test_an_outage_longer_than_the_retry_time_is_one_clear_error(pg_through_proxy):
    url, proxy = pg_through_proxy
    store = Store(url, retry_s=1.5)
    proxy.down()
    t0 = time.monotonic()
    with pytest.raises(StoreError, match=r"add_production_config: database .* unavailable for 1.5 s") as caught:
        _add(store, 0)
    assert 1.0 < time.monotonic() - t0 < 10 and "\n" not in str(caught.value)
    proxy.up()
    assert _add(store, 1) == 1  # nothing was half-written: the next version is the first
    store.close()


def test_run_takes_the_retry_time_for_the_database_and_mlflow(tmp_path, monkeypatch):
    """`specfleet run --retry-s S` is how long both stores' calls wait out an outage; a value out of
    range is refused before anything is opened."""
    import yaml
    from typer.testing import CliRunner

    import pipeline.run.executor
    from pipeline.cli.main import app
    from pipeline.run.executor import RunSummary

    seen = {}

    def run_plan(plan, *, store, tracker, **kw):
        seen.update(db=store.retry_s, mlflow=tracker.retry_s)
        return RunSummary(1, "run", "no cluster needed")

    monkeypatch.setattr(pipeline.run.executor, "run_plan", run_plan)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(
        yaml.safe_dump({"name": "r", "targets": [{"name": "t", "builtin": {}}], "drafters": [{"name": "d"}]})
    )
    done = CliRunner().invoke(app, ["run", "s.yaml", "--retry-s", "7.5"])
    assert done.exit_code == 0, done.output
    assert seen == {"db": 7.5, "mlflow": 7.5}
    refused = CliRunner().invoke(app, ["run", "s.yaml", "--retry-s", "-1", "--workdir", "elsewhere"])
    assert str(refused.exception) == "--retry-s: -1 is outside [0, 86400]"  # the CLI's entry prints it, exit 1
    assert not (tmp_path / "elsewhere").exists()


def test_a_database_with_the_wrong_schema_fails_at_once(db_url):
    """A missing column is not an outage: no retrying for retry_s, one error naming the database."""
    store = Store(db_url, retry_s=30)
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE tuned_configs DROP COLUMN tree_speedup"))
    engine.dispose()
    start = time.monotonic()
    with pytest.raises(StoreError, match=r"read: the schema of database .* does not match .*tree_speedup"):
        store.best()
    assert time.monotonic() - start < 5
    store.close()
