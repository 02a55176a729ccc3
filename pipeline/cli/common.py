"""What the `specfleet` commands share: the consoles, the switches that say where things live, and
opening the database they name.

The switches only say where things live; everything that changes a result belongs in the spec.
`--workdir DIR` (default `.specfleet/` in the current folder) holds the embedded defaults: the
database `sqlite:///DIR/specfleet.db` (`--db`, `$SPECFLEET_DB`), the MLflow store
`sqlite:///DIR/mlflow.db` with artifacts in `DIR/mlflow-artifacts` (`--mlflow`,
`$MLFLOW_TRACKING_URI`), the checkpoints in `DIR/checkpoints/` (`specfleet run --checkpoints`,
`$SPECFLEET_CHECKPOINTS`; pipeline/core/artifacts.py) and the reports.

Where things are stored:
- MLflow gets one parent run per experiment and one child run per job, tagged
  `specfleet.job_hash`, with the job config as params; the curves (`cond_accept`, `survival`,
  `accept_len`, `decode_accept_len`) as metrics with `step = depth`; training losses with
  `step = training step`; `worker.log`, what the job printed, logged and warned on its Ray
  worker, with its host, from start to end or to its failure (a failed job's traceback is in
  the database: `specfleet status --job`); the place of each training and data job's files as
  tags `specfleet.files_uri`, `specfleet.files_sha256` and `specfleet.files_bytes`. No figures
  per job: MLflow charts every series by its step, and drawing them on the driver was most of
  what recording a job cost (experiments/results/fleet_scale/README.md); `specfleet report`
  draws an experiment's figures once and logs its page (`report.html`, its PNGs and
  `tables.md`) on the experiment's parent run under `report/` (a comparison under
  `report-vs-OTHER/`).
- Reports go to `DIR/reports/EXPERIMENT/` unless `--out` says otherwise; `specfleet run` also
  leaves a plot of every pairing's curves there (`DIR/reports/EXPERIMENT-curves.png`; up to 24
  pairings, beyond which one plot cannot tell them apart).
- The database (SQLAlchemy 2 with Alembic migrations) has these tables:
  `experiments`; `jobs` (hash, kind, status, attempts, timings, MLflow run id, result);
  `experiment_jobs`; `curves` (per pairing, condition, temperature, prompt category, "" for
  every prompt, and depth: `cond_accept`, `survival`, `accept_len`, `decode_accept_len`);
  `category_depths` (per select job and prompt category: the depth that category gets on its
  own, its prompts, tokens per pass and predicted speedup); `diagnostics` (the drift
  diagnostics measured beside a curve, per depth; depth 0: per-stream RMS of the whole curve);
  `tuned_configs` (versioned: pairing, hardware, condition, depth, schedule, predicted speedup,
  cost ratio, what the choice maximised, `decode_accept_len` at the depth, how it costed a pass,
  `cost_model` `timed` or `leviathan` with `pass_cost` per depth when timed, how its curve drew
  drafts above temperature 0, `draft_sampling`, source, and provenance: curve, cost and drafter
  jobs, spec hash, code version, MLflow run id, created at); `speedup_checks` (per pairing,
  hardware and depth k = 0..max_depth: the engine's measured tokens/s, measured and predicted
  speedup, tokens per target pass; the HF `generate` timings of `compare_hf` stay in the
  benchmark job's result, which `specfleet speedups` reads); `rank_accepts` (acceptance by rank
  and depth beside each curve, for draft trees: pipeline/core/trees.py).
  Only the driver writes. Every write is one transaction, and writes are idempotent on the job
  hash. The tables are defined once (db/tables.py, with migrations 0001-0009 creating exactly
  them), and the rows of a job's result are built in one place, db/rows.py, from the typed
  result. Migration 0005 moved `decode_accept_len` from `diagnostics` into `curves` (rows of
  older databases move with it) and added the choice's inputs to `tuned_configs`, filled in
  for older offline versions from their select and cost jobs, so a production re-tune reads
  how to cost a pass from the tuned config alone.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from pipeline.errors import UserError

out = Console(width=None if sys.stdout.isatty() else 120)  # no wrapping of tables in logs and pipes
err = Console(stderr=True)


def _usable_workdir(value: Path) -> Path:
    """A work directory the system can look at: a path it refuses (too long) is one line naming
    --workdir, before any command reads or writes there."""
    from pipeline.core.labels import shown

    try:
        value.expanduser().exists()
    except OSError as exc:
        raise UserError(f"--workdir: cannot use {shown(str(value))}: {exc.strerror or exc}") from None
    return value


WorkdirOpt = Annotated[
    Path,
    typer.Option("--workdir", help="Where the default SQLite stores and checkpoints live.", callback=_usable_workdir),
]
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


def in_range(option: str, value: float, low: float, high: float, *, low_open: bool = False) -> None:
    """A finite number in [low, high] (or (low, high]), else a UserError naming the option."""
    if not math.isfinite(value) or value > high or value < low or (low_open and value == low):
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise UserError(f"{option}: {value:g} is outside {interval}")


def check_label(option: str, value: str | None, fix: str = "") -> None:
    """A flag whose value is stored as a label (pipeline/core/labels.py): None, or a UserError
    naming the flag, what is wrong and `fix`."""
    from pipeline.core.labels import label_problem, shown

    problem = label_problem(value) if value is not None else None
    if problem:
        raise UserError(f"{option}: {shown(value)} {problem}" + (f" ({fix})" if fix else ""))
