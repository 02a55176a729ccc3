"""Revision 0014 on both real backends: a tuned config says how its DFlash curve drafted a depth below
the trained block. Rows from before it read None (autotune takes those as whole blocks, which is all
specfleet measured then); the schema after it is the tables' own, and it downgrades keeping the rows.
"""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import insert, select
from support.databases import engine_for

from db.migrate import alembic_config, current_revision, head_revision
from db.store import Store
from db.tables import Base, utc_now
from pipeline.autotune.choice_row import block_drafting_of
from tests.db.test_migration_0011 import PRODUCTION, TUNED_AT_0010

# the columns every revision has had since the first, and a production version's values for them
TUNED_AT_0013 = TUNED_AT_0010


def test_rows_before_0014_read_as_whole_blocks(db_url: str) -> None:
    engine = engine_for(db_url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0013")
        connection.execute(
            insert(TUNED_AT_0013).values(
                **PRODUCTION, created_at=utc_now(), version=1, active=True, source="production"
            )
        )
    with Store(db_url) as store:  # opening upgrades to the head revision
        (old,) = store.best()
        assert old["block_drafting"] is None and block_drafting_of(old) == "trained"
    with engine.begin() as connection:
        assert current_revision(connection) == head_revision()
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
        command.downgrade(alembic_config(connection), "0013")
        assert len(connection.execute(select(TUNED_AT_0013.c.version)).all()) == 1
        command.upgrade(alembic_config(connection), "head")
    engine.dispose()
