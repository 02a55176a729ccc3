"""The test databases: a fresh PostgreSQL database per use, and raw engines for migration tests.

PostgreSQL comes from SPECFLEET_TEST_PG_URL (default: trust auth on 127.0.0.1:5432, database
``test``). When it cannot be reached its tests fail under CI and are skipped elsewhere.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.exc import OperationalError

from db.engine import normalize_url

PG_BASE_URL = normalize_url(
    os.environ.get("SPECFLEET_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
)


def fresh_pg_database() -> Iterator[str]:
    admin = create_engine(PG_BASE_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
    name = f"specfleet_t_{uuid.uuid4().hex}"
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as error:
        admin.dispose()
        message = f"PostgreSQL at {make_url(PG_BASE_URL)!r} unreachable: {error.orig}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield make_url(PG_BASE_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def engine_for(db_url: str):
    """A raw engine on the test database (its SQLite folder made first), for migration tests."""
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite":
        os.makedirs(os.path.dirname(url.database), exist_ok=True)
    return create_engine(db_url)
