"""specfleet tuned-config database: SQLAlchemy tables, the store, Alembic migrations."""
