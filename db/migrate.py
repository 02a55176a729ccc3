"""Upgrade a database to the newest schema with Alembic, configured in code.

The migrations folder ships inside the package, so no alembic.ini is needed at runtime.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"

# Serialises concurrent upgrades of one PostgreSQL database (two drivers starting at once);
# an arbitrary constant that only has to be the same in every specfleet process.
_PG_MIGRATION_LOCK = 0x5BEC_F1EE7


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    # Config values go through configparser interpolation, where "%" is special.
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise RuntimeError(f"no migrations found under {MIGRATIONS_DIR}")
    return head


def current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def upgrade_to_head(connection: Connection) -> None:
    """Apply every missing migration inside the caller's transaction on ``connection``."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK})
    command.upgrade(alembic_config(connection), "head")
