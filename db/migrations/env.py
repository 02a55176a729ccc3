"""Alembic environment for the specfleet database.

Migrations run only on the connection that ``db.migrate.upgrade_to_head`` passes in through
``config.attributes["connection"]``, inside the caller's transaction, so the store's own engine
(a SQLite file or PostgreSQL) is used and there is no alembic.ini or second URL to keep in sync.
"""

from alembic import context

from db.tables import Base

connection = context.config.attributes.get("connection")
if context.is_offline_mode() or connection is None:
    raise RuntimeError("specfleet migrations run online only: call db.migrate.upgrade_to_head(connection)")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    # SQLite cannot ALTER most things in place; batch mode copies the table instead.
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
