"""Revision 0011 on both real backends: a tuned config says whose clock timed its costs.

Fixtures come from test_store.py, so these tests run on the same SQLite file and fresh
PostgreSQL database.
"""

from __future__ import annotations

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import column, insert, select, table
from support.databases import engine_for

from db.migrate import alembic_config, current_revision, head_revision
from db.store import Store, StoreError
from db.tables import Base, utc_now

PRODUCTION = dict(
    target="t",
    drafter="d",
    hardware="cpu",
    condition="production",
    temperature=0.0,
    depth=2,
    accept_len=1.8,
    speedup=1.2,
    cost_ratio=0.1,
    code_version="v",
)
TUNED_AT_0010 = table("tuned_configs", *(column(n) for n in (*PRODUCTION, "created_at", "version", "active", "source")))


def test_versions_before_0011_have_no_clock_and_new_ones_keep_theirs(db_url: str) -> None:
    engine = engine_for(db_url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0010")
        connection.execute(
            insert(TUNED_AT_0010).values(
                **PRODUCTION, created_at=utc_now(), version=1, active=True, source="production"
            )
        )
    with Store(db_url) as store:  # opening upgrades to the head revision
        (old,) = store.best()
        assert old["timed_by"] is None
        store.add_production_config(**PRODUCTION, timed_by="vllm 0.32.0")
        (new,) = store.best()
        assert (new["version"], new["timed_by"]) == (2, "vllm 0.32.0")
        with pytest.raises(StoreError, match="timed_by"):
            store.add_production_config(**PRODUCTION, timed_by="v" * 65)
        assert len(store.best(history=True)) == 2  # the refused version wrote nothing
    with engine.begin() as connection:
        assert current_revision(connection) == head_revision()
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
        command.downgrade(alembic_config(connection), "0010")
        assert len(connection.execute(select(TUNED_AT_0010.c.version)).all()) == 2
        command.upgrade(alembic_config(connection), "head")
    engine.dispose()
