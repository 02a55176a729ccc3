"""Turn a database URL into a ready engine: driver chosen, folder created, schema upgraded."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from alembic.util import CommandError
from sqlalchemy import URL, Engine, create_engine, event, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from db.errors import StoreError, one_line
from db.migrate import upgrade_to_head
from db.secrets import mask_secrets

SUPPORTED_BACKENDS = ("sqlite", "postgresql")
PG_SCHEME = "postgresql+psycopg"
PG_CONNECT_TIMEOUT_S = 10
SQLITE_BUSY_TIMEOUT_S = 30


def normalize_url(url: str) -> str:
    """Send bare PostgreSQL URLs (as Heroku-style services hand them out) to psycopg 3."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return f"{PG_SCHEME}://{url[len(prefix) :]}"
    return url


def mask_url(url: str) -> str:
    """The URL with every secret hidden, fit for messages and logs: its password as SQLAlchemy hides
    it (which reads a password holding `/` or a space whole), then what db/secrets.py masks (a
    password in the query, an unencoded @ in the password). Text SQLAlchemy cannot read as a URL
    (libpq's key=value form) is masked as text."""
    try:
        shown = make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        shown = url
    return mask_secrets(shown)


def open_database(url: str) -> Engine:
    """An engine on ``url`` whose schema is at the newest revision; StoreError if impossible."""
    engine: Engine | None = None
    try:
        engine = _create_engine(make_url(normalize_url(url)))
        with engine.begin() as connection:
            upgrade_to_head(connection)
    except (SQLAlchemyError, CommandError, OSError) as error:
        if engine is not None:
            engine.dispose()
        raise StoreError(f"cannot open database {mask_url(url)}: {one_line(error)}") from error
    return engine


def _create_engine(url: URL) -> Engine:
    backend = url.get_backend_name()
    if backend not in SUPPORTED_BACKENDS:
        raise ArgumentError(f"unsupported backend {backend!r}, use sqlite or postgresql")
    if backend == "postgresql":
        return create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": PG_CONNECT_TIMEOUT_S})
    _make_parent_folder(url.database)
    # the driver's timeout is SQLite's busy timeout: a writer waits this long for another's lock
    engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})
    event.listen(engine, "connect", _on_sqlite_connect)
    event.listen(engine, "begin", _on_sqlite_begin)
    return engine


def _make_parent_folder(database: str | None) -> None:
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)


def _on_sqlite_connect(dbapi_connection, connection_record) -> None:
    # Foreign keys are off in SQLite unless asked for on every connection. Turning off the
    # driver's own transaction handling lets _on_sqlite_begin start real transactions, so
    # schema changes are atomic too (pysqlite otherwise runs DDL outside any transaction).
    dbapi_connection.isolation_level = None
    dbapi_connection.execute("PRAGMA foreign_keys = ON")
    # WAL: readers never wait for the writer, and the writer never waits for readers. It is a
    # property of the file, set once by whichever connection comes first (in memory: no file).
    _switch_to_wal(dbapi_connection)


def _switch_to_wal(dbapi_connection) -> None:
    # SQLite refuses the switch at once, without its busy timeout, while another connection
    # holds a write lock: as when a process read "delete" just before another switched the file
    # and began writing. Wait for the file to be switched, or free to switch, as long as a
    # writer would wait for a lock.
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_S
    delay = 0.01
    while dbapi_connection.execute("PRAGMA journal_mode").fetchone()[0].lower() not in ("wal", "memory"):
        try:
            dbapi_connection.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)
            delay = min(2 * delay, 0.5)


def _on_sqlite_begin(connection) -> None:
    # IMMEDIATE takes the write lock when the transaction starts. A deferred transaction that
    # reads and then writes has to upgrade its lock, and SQLite refuses that at once ("database
    # is locked", without waiting) when another writer got there first; IMMEDIATE waits its turn.
    connection.exec_driver_sql("BEGIN IMMEDIATE")
