"""Revision 0012 on both real backends: a tuned config says how far its schedule was measured.

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
from tests.db.test_migration_0011 import PRODUCTION

TUNED_AT_0011 = table(
    "tuned_configs", *(column(n) for n in (*PRODUCTION, "created_at", "version", "active", "source", "schedule_json"))
)


def test_versions_before_0012_say_nothing_and_new_ones_keep_where_measuring_ended(db_url: str) -> None:
    engine = engine_for(db_url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0011")
        connection.execute(
            insert(TUNED_AT_0011).values(
                **PRODUCTION,
                created_at=utc_now(),
                version=1,
                active=True,
                source="production",
                schedule_json="[[1, 256, 2]]",
            )
        )
    with Store(db_url) as store:  # opening upgrades to the head revision
        (old,) = store.best()
        assert old["schedule"] == [[1, 256, 2]] and old["schedule_measured_to"] is None
        store.add_production_config(**PRODUCTION, schedule=[[1, 4, 2], [5, 64, 1]], schedule_measured_to=4)
        (new,) = store.best()
        assert (new["version"], new["schedule_measured_to"]) == (2, 4)
        for wrong in (65, 0, True, 2.0):  # past the schedule's end, not a batch size, not an integer
            with pytest.raises(StoreError, match="schedule_measured_to"):
                store.add_production_config(**PRODUCTION, schedule=[[1, 64, 2]], schedule_measured_to=wrong)
        with pytest.raises(StoreError, match="schedule_measured_to"):  # no schedule to have measured
            store.add_production_config(**PRODUCTION, schedule_measured_to=1)
        assert len(store.best(history=True)) == 2  # the refused versions wrote nothing
    with engine.begin() as connection:
        assert current_revision(connection) == head_revision()
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
        command.downgrade(alembic_config(connection), "0011")
        assert len(connection.execute(select(TUNED_AT_0011.c.version)).all()) == 2
        command.upgrade(alembic_config(connection), "head")
    engine.dispose()
