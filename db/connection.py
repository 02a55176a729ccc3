"""A database connection whose reads and writes ride out a brief outage: each body runs in one
session (one transaction for a write), retried with backoff while the database is unreachable,
never when it refuses the write or its schema is not this version's.

Outages. A read or write that meets a database that is restarting or unreachable is retried
with backoff (from 0.05 s, doubling to 2 s) for `$SPECFLEET_DB_RETRY_S` seconds (default 60;
`specfleet run --retry-s`), each attempt rolled back, so it lands once or not at all; after
that it is one error naming the database. A write refused by a constraint is not retried, and
a database missing a column is refused at once, not waited out as an outage. The tests take a
PostgreSQL server away through a proxy mid-write and bring it back: each write lands once.

Shared databases (db/store.py, db/owners.py):
- Jobs have owners. A driver claims every job it is about to run, all at once (`jobs.owner`,
  `jobs.lease_until`; migration 0008), under a lease it renews every 20 s
  (`$SPECFLEET_LEASE_S`, default 60). A second driver on the same jobs holds nothing and waits
  while the first holds any of them, then reuses what the first finished; a job is marked
  running, done or failed only by the driver that holds it, and a failure never overwrites a
  finished result. The jobs of a driver that died are taken over when its lease runs out, at
  once when its process on this host is gone; the MLflow runs it left running are ended
  (killed, or finished when the job had been recorded). The tests kill a driver with SIGKILL
  at 5 points (tests/support/kill_driver.py: after claiming, in a job, between creating a job's
  MLflow run and marking it running, between MLflow and the database, after the last job is
  recorded), run it again, and find the database and MLflow equal to one uninterrupted run's;
  two drivers started together run every job once.
- Concurrent writers. Any number of processes (runs, `autotune`, production re-tunes) may
  write one database at once. A workload's versions are numbered under a lock (a PostgreSQL
  advisory lock per workload; on SQLite the write lock every transaction takes when it starts,
  `BEGIN IMMEDIATE`, in WAL mode with a 30 s busy timeout), so versions run 1, 2, ... with no
  gap and exactly one is active. The tests run 8 and 16 writer processes on each backend, and 8
  concurrent `autotune --from-metrics` commands from one page on a new database: one version
  stored, the other seven reuse it (db/production.py), no error.
- Secrets are masked as `***` (db/secrets.py) wherever specfleet prints, logs or stores a
  connection string or an error: URL user info, `?password=` and other secret query
  parameters, libpq `password=...` strings, `NAME_TOKEN=value` pairs (and `PGPASSWORD`,
  `AWS_SECRET_ACCESS_KEY`, `*_PASSWD`, `*_API_KEY`) and bearer headers.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Self, TypeVar

from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError, ProgrammingError
from sqlalchemy.orm import Session, sessionmaker

from db.engine import mask_url, open_database
from db.errors import StoreError, one_line

log = logging.getLogger(__name__)
T = TypeVar("T")


class Connected:
    """An open database (the schema upgraded) with retried reads and writes."""

    def __init__(self, url: str, *, retry_s: float | None = None) -> None:
        """Open ``url`` (``sqlite:///path`` or ``postgresql+psycopg://...``), upgrade its schema.

        Raises StoreError, naming the URL with its password masked, when that fails. Reads and
        writes ride out a database that is briefly unavailable for ``retry_s`` seconds
        (default: $SPECFLEET_DB_RETRY_S, else 60).
        """
        self.retry_s = retry_s if retry_s is not None else float(os.environ.get("SPECFLEET_DB_RETRY_S", 60))
        self.url = mask_url(url)
        self._engine = open_database(url)
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _write(self, action: str, body: Callable[[Session], T]) -> T:
        """``body`` in one transaction: committed when it returns, rolled back if it raises.

        A transient failure (the database restarting or unreachable, a lock held too long) is
        retried with backoff for up to ``retry_s`` seconds; the transaction is rolled back each
        time, so a write lands once or not at all. A refused write (a constraint) is not retried.
        """
        return self._retrying(action, body, begin=True)

    def _read(self, body: Callable[[Session], T]) -> T:
        """``body`` in a read session, retried as writes are."""
        return self._retrying("read", body, begin=False)

    def _retrying(self, action: str, body: Callable[[Session], T], *, begin: bool) -> T:
        deadline = time.monotonic() + self.retry_s
        delay = 0.05
        while True:
            try:
                if begin:
                    with self._sessions.begin() as session:
                        return body(session)
                with self._sessions() as session:
                    return body(session)
            except IntegrityError as error:
                raise StoreError(f"{action} refused by {self.url}: {one_line(error)}") from error
            except (OperationalError, InterfaceError, ProgrammingError) as error:
                if _is_schema_error(error):
                    raise StoreError(
                        f"{action}: the schema of database {self.url} does not match this specfleet "
                        f"version (a table or column is missing): {one_line(error)}"
                    ) from error
                if isinstance(error, ProgrammingError):
                    raise
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StoreError(
                        f"{action}: database {self.url} unavailable for {self.retry_s:g} s "
                        f"(--retry-s, SPECFLEET_DB_RETRY_S): {one_line(error)}"
                    ) from error
                wait = min(delay, remaining)
                log.warning("%s: database %s: %s; retrying in %.2f s", action, self.url, one_line(error), wait)
                time.sleep(wait)
                delay = min(2 * delay, 2.0)


_SQLITE_SCHEMA = ("no such table", "no such column", "has no column named")
_PG_SCHEMA = ("42P01", "42703")  # SQLSTATE undefined_table, undefined_column


def _is_schema_error(error: OperationalError | InterfaceError | ProgrammingError) -> bool:
    """A table or column the database lacks (SQLite says so in an OperationalError's text,
    PostgreSQL by its SQLSTATE): waiting never fixes it."""
    return getattr(error.orig, "sqlstate", None) in _PG_SCHEMA or any(
        text in str(error.orig) for text in _SQLITE_SCHEMA
    )
