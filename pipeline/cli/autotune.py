"""`specfleet autotune`: a ready engine config for one pairing, from its active tuned config or
from a serving engine's production metrics (stored as a 'production' version once per distinct
input: pipeline/autotune/retune_inputs.py; `--dry-run` stores nothing). A database is created
only to store a version: a call that fails, or a dry run, leaves no database where none was."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli.common import (
    DbOpt,
    WorkdirOpt,
    check_label,
    db_url,
    err,
    in_range,
    open_store,
    read_store,
)
from pipeline.errors import UserError


def autotune(
    engine: Annotated[
        str, typer.Option("--engine", help="vllm | sglang | trtllm | transformers (or vLLM, TensorRT-LLM, hf ...)")
    ],
    engine_version: Annotated[
        str | None,
        typer.Option(
            "--engine-version",
            help="The engine release to write for "
            "(default: vllm 0.33.0, sglang 0.5.23, trtllm 1.2.1, transformers 5.24.0).",
        ),
    ] = None,
    target: Annotated[str | None, typer.Option("--target", help="The pairing's target.")] = None,
    drafter: Annotated[str | None, typer.Option("--drafter", help="The pairing's drafter.")] = None,
    hardware: Annotated[str | None, typer.Option("--hardware", help="Which hardware's tuned config.")] = None,
    condition: Annotated[
        str | None,
        typer.Option(
            "--condition",
            help="Which condition's tuned config (default: the newest active version, so a production re-tune wins).",
        ),
    ] = None,
    drafter_path: Annotated[
        str | None,
        typer.Option("--drafter-path", help="Drafter path for the engine (default: export the trained one)."),
    ] = None,
    export_format: Annotated[
        str,
        typer.Option(
            "--export-format", help="How a trained EAGLE-3 drafter is exported: eagle3 | speculators (vLLM reads both)."
        ),
    ] = "eagle3",
    from_metrics: Annotated[
        list[str] | None, typer.Option("--from-metrics", help="vLLM /metrics file or URL; twice for a window.")
    ] = None,
    model: Annotated[str | None, typer.Option("--model", help="model_name label to read from the metrics.")] = None,
    cost_ratio: Annotated[
        float | None,
        typer.Option("--cost-ratio", help="Drafter/target step-time ratio (default: the stored cost table)."),
    ] = None,
    method: Annotated[
        str | None, typer.Option("--method", help="eagle3 | draft_model (default: the drafter's own).")
    ] = None,
    temperature: Annotated[float, typer.Option("--temperature", help="The deployment's sampling temperature.")] = 0.0,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="With --from-metrics: print the engine config, store and create nothing."),
    ] = False,
    workdir: WorkdirOpt = Path(".specfleet"),
    db: DbOpt = None,
):
    """Print a ready engine config for one pairing: from its active tuned config, or from
    production metrics (stored as a 'production' version, once per distinct input)."""
    from pipeline.autotune import retune as retune_from
    from pipeline.autotune import tuning as tune
    from pipeline.core.engine_names import canonical_engine
    from pipeline.version import code_version

    engine = canonical_engine(engine)
    if engine not in tune.ENGINES:
        raise UserError(f"--engine: unknown engine {engine!r}; use one of {', '.join(tune.ENGINES)}")
    tune.check_options(engine, engine_version, method, export_format, drafter_path)
    in_range("--temperature", temperature, 0.0, 2.0)
    if cost_ratio is not None:
        in_range("--cost-ratio", cost_ratio, 0.0, 1000.0, low_open=True)
    for option, value in (("--target", target), ("--drafter", drafter), ("--hardware", hardware), ("--model", model)):
        check_label(option, value)
    if dry_run and not from_metrics:
        raise UserError("--dry-run: only with --from-metrics (a config from a stored version stores nothing)")
    if from_metrics and drafter is None and drafter_path is not None:
        check_label("--drafter-path", Path(drafter_path).name, "its last part names the drafter; give --drafter NAME")
    counters = retune_from.read_counters(from_metrics, model) if from_metrics else None  # all read before a write
    if from_metrics:
        name = drafter or (Path(drafter_path).name if drafter_path else None)
        if name is None or drafter_path is None:
            raise UserError("--drafter-path: name the deployed drafter (its path goes into the config)")
        store = None if _missing_sqlite_file(workdir, db) else open_store(workdir, db)  # made only to store
        try:
            path, method = tune.drafter_path(store, {"target": model, "drafter": name}, workdir, drafter_path, method)
            tune.check_options(engine, engine_version, method, export_format, path)  # before a version is stored
            retune = retune_from.decide_from_metrics(
                store,
                counters,
                model_name=model,
                drafter=name,
                cost_ratio=cost_ratio,
                hardware=hardware,
                temperature=temperature,
                code_version=code_version(),
            )
            if not dry_run:
                store = store or open_store(workdir, db)
            row = retune_from.retune_row(retune, None if dry_run else store.ensure_production_config(retune.config))
        finally:
            if store is not None:
                store.close()
        err.print(f"{_stored_line(row)}: depth {row['depth']}; {retune.report}", markup=False, soft_wrap=True)
        if not _speculates(row):
            return
        _print_config(
            engine, row, path=path, method=method, version=engine_version, workdir=workdir, write_files=not dry_run
        )
        return
    store = read_store(workdir, db)  # a work directory without a database is said, not made into one
    try:
        row, note = tune.pick_version(
            store.best(target=target, drafter=drafter), hardware=hardware, condition=condition
        )
        if note:
            err.print(f"{row['target']}/{row['drafter']}: {note}", markup=False, soft_wrap=True)
        if not _speculates(row):
            return
        path, method = tune.drafter_path(store, row, workdir, drafter_path, method, export_format)
    finally:
        store.close()
    _print_config(engine, row, path=path, method=method, version=engine_version, workdir=workdir)


def _stored_line(row: dict) -> str:
    """What became of a re-tune: stored as a new version, the active version reused, or (a dry run) neither."""
    pairing = f"{row['target']}/{row['drafter']}"
    if row["version"] is None:
        return f"dry run: production version for {pairing} not stored"
    if row["reused"]:
        return f"reused production version {row['version']} for {pairing} (the active one, from the same inputs)"
    return f"stored production version {row['version']} for {pairing}"


def _missing_sqlite_file(workdir: Path, db: str | None) -> Path | None:
    """The SQLite file the database URL names, when it does not exist yet (opening would create
    it); None for one that exists, for PostgreSQL, for memory and for a URL that opening will refuse."""
    from sqlalchemy import make_url
    from sqlalchemy.exc import ArgumentError

    from db.engine import normalize_url

    try:
        url = make_url(normalize_url(db_url(workdir, db)))
    except (ArgumentError, ValueError):
        return None
    name = url.database
    if url.get_backend_name() != "sqlite" or not name or name == ":memory:" or name.startswith("file:"):
        return None
    path = Path(name).expanduser()
    return None if path.exists() else path


def _print_config(
    engine: str, row: dict, *, path: str, method: str, version: str | None, workdir: Path, write_files: bool = True
) -> None:
    """The row's config for the engine on stdout (its tree when one is served: never for a
    production version, which has none); what the engine release could not express, and files it
    reads, on stderr. Without `write_files` (a dry run) the files the config names are not written."""
    from pipeline.autotune import tuning as tune
    from pipeline.autotune.choice_row import block_drafting_of, sampling_of, schedule_of, tree_of, unmeasured_note

    emitted = tune.render(
        engine,
        schedule_of(row),
        model=path,
        method=method,
        version=version,
        config_dir=workdir / "engine-configs",
        draft_sampling=sampling_of(row),
        block_drafting=block_drafting_of(row),
        tree=tree_of(row),
        write_files=write_files,
    )
    measured = unmeasured_note(row)
    unwritten = tuple(
        f"dry run: {(workdir / 'engine-configs' / name).resolve()} is not written; run without --dry-run to write it"
        for name in (() if write_files else emitted.files)
    )
    for note in emitted.notes + ((measured,) if measured else ()) + unwritten:
        err.print(f"note: {note}", markup=False, soft_wrap=True)
    if emitted.text:  # nothing to configure: serve without speculative settings (a note says so)
        sys.stdout.write(emitted.text.rstrip("\n") + "\n")


def _speculates(row: dict) -> bool:
    """False, with a note, when the tuned depth is 0 at every batch size: then there is nothing to
    configure, and the engine's answer is to serve without a drafter (stdout stays empty)."""
    from pipeline.autotune.choice_row import schedule_of, tree_of

    if max(k for _, _, k in schedule_of(row)) > 0 or tree_of(row):  # a tree can pay where no chain does
        return True
    err.print(
        f"{row['target']}/{row['drafter']}: depth 0 at every batch size, speculation does not pay "
        f"on {row.get('hardware') or 'this hardware'}; serve without speculative settings",
        markup=False,
        soft_wrap=True,
    )
    return False
