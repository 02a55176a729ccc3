"""What the `specfleet` commands share: the consoles, the switches that say where things live, and
opening the database they name."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from pipeline.errors import UserError

out = Console(width=None if sys.stdout.isatty() else 120)  # no wrapping of tables in logs and pipes
err = Console(stderr=True)

WorkdirOpt = Annotated[Path, typer.Option("--workdir", help="Where the default SQLite stores and checkpoints live.")]
DbOpt = Annotated[
    str | None, typer.Option("--db", help="Database URL (default: $SPECFLEET_DB or SQLite in the workdir).")
]
MlflowOpt = Annotated[
    str | None,
    typer.Option("--mlflow", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or SQLite in the workdir)."),
]


def workdir_db(workdir: Path) -> Path:
    """The embedded default database's SQLite file in the work directory."""
    return workdir / "specfleet.db"


def workdir_stores(workdir: Path) -> tuple[str, str, str]:
    """(database URL, MLflow tracking URI, MLflow artifact root) of the embedded default: SQLite files
    and a folder in the work directory."""
    return (
        f"sqlite:///{workdir_db(workdir).resolve()}",
        f"sqlite:///{(workdir / 'mlflow.db').resolve()}",
        str(workdir / "mlflow-artifacts"),
    )


def db_url(workdir: Path, db: str | None) -> str:
    return db or os.environ.get("SPECFLEET_DB") or workdir_stores(workdir)[0]


def mlflow_uri(workdir: Path, uri: str | None) -> tuple[str, str | None]:
    """(tracking URI, artifact root or None when a server decides)."""
    chosen = uri or os.environ.get("MLFLOW_TRACKING_URI")
    if chosen:
        return chosen, None
    return workdir_stores(workdir)[1:]


def output_folder(folder: Path, option: str = "--out") -> Path:
    """`folder`, made if missing, once a file can be written there: a folder the user cannot write to
    fails here, in one line naming the option, before any work whose results it would hold."""
    from pipeline.core.artifacts import check_writable

    try:
        check_writable(str(folder))
    except ValueError as exc:
        raise UserError(f"{option}: {exc}") from None
    return folder


def read_store(workdir: Path, db: str | None):
    """The store a command that only reads opens: without --db or $SPECFLEET_DB the work directory's
    SQLite file must already exist, so a mistyped --workdir is said rather than made into an empty
    database."""
    path = workdir_db(workdir)
    if db_url(workdir, db) == workdir_stores(workdir)[0] and not path.is_file():
        raise UserError(
            f"--workdir: {workdir} holds no specfleet database ({path.name}); "
            f"`specfleet run SPEC --workdir {workdir}` makes one, or name one with --db"
        )
    return open_store(workdir, db)


def open_store(workdir: Path, db: str | None, retry_s: float | None = None):
    from db.store import Store, StoreError

    try:
        return Store(db_url(workdir, db), retry_s=retry_s)
    except StoreError as exc:
        raise UserError(f"--db: {exc}") from None
