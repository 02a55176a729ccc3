"""Revision 0013 on both real backends: a production version keeps the digest of its inputs.

Fixtures come from tests/conftest.py, so these tests run on a SQLite file and a fresh PostgreSQL
database.
"""

from __future__ import annotations

import hashlib

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import column, insert, select, table
from support.databases import engine_for
from test_migration_0012 import TUNED_AT_0011

from db.migrate import alembic_config, current_revision, head_revision
from db.store import Store
from db.tables import Base, utc_now
from tests.db.test_migration_0011 import PRODUCTION

TUNED_AT_0012 = table("tuned_configs", *(column(c.name) for c in TUNED_AT_0011.c), column("schedule_measured_to"))
DIGEST = hashlib.sha256(b"one metrics window").hexdigest()


def test_versions_before_0013_have_no_digest_so_the_first_retune_after_is_stored(db_url: str) -> None:
    engine = engine_for(db_url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0012")
        connection.execute(
            insert(TUNED_AT_0012).values(
                **PRODUCTION, created_at=utc_now(), version=1, active=True, source="production"
            )
        )
    with Store(db_url) as store:  # opening upgrades to the head revision
        (old,) = store.best()
        assert (old["version"], old["active"]) == (1, True)
        assert store.ensure_production_config({**PRODUCTION, "inputs_sha256": DIGEST}) == (2, False)
        assert store.ensure_production_config({**PRODUCTION, "inputs_sha256": DIGEST}) == (2, True)
    with engine.begin() as connection:
        assert current_revision(connection) == head_revision()
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
        digests = table("tuned_configs", column("version"), column("inputs_sha256"))
        stored = connection.execute(select(digests.c.version, digests.c.inputs_sha256).order_by("version")).all()
        assert [tuple(r) for r in stored] == [(1, None), (2, DIGEST)]
        command.downgrade(alembic_config(connection), "0012")
        assert len(connection.execute(select(TUNED_AT_0012.c.version)).all()) == 2
        command.upgrade(alembic_config(connection), "head")
    engine.dispose()
