"""A database that goes away mid-run and comes back: writes wait for it, land once, and say why."""
from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import make_url
from tcp_proxy import TcpProxy
from test_store import PG_BASE_URL, _fresh_pg_database

from db.store import Store, StoreError


@pytest.fixture()
def pg_through_proxy():
    """A fresh PostgreSQL database reached through a proxy the test can take down."""
    for url in _fresh_pg_database():
        proxy = TcpProxy(make_url(PG_BASE_URL).port or 5432)
        yield make_url(url).set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False), proxy
        proxy.down()


def _add(store: Store, n: int) -> int:
    return store.add_production_config(target="t", drafter="d", hardware="cpu", condition="default", temperature=0.0,
                                       depth=1, accept_len=1.5, speedup=1.1, cost_ratio=0.1, code_version="v",
                                       notes=f"measurement {n}")


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
