"""The commands that read tuned configs: `specfleet best` (the chosen depth and draft tree per
pairing) and `specfleet speedups` (predicted vs measured speedup per depth)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli.common import (
    DbOpt,
    WorkdirOpt,
    err,
    out,
    read_store,
)


def best(
    target: Annotated[str | None, typer.Option("--target", help="Only this target.")] = None,
    drafter: Annotated[str | None, typer.Option("--drafter", help="Only this drafter.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
    history: Annotated[bool, typer.Option("--history", help="Every version, not only the active one.")] = False,
    by_category: Annotated[
        bool,
        typer.Option(
            "--by-category",
            help="Also the depth each prompt category gets on its own (a prompts file with "
            "categories); a production version shows its workload's newest offline choice's.",
        ),
    ] = False,
    workdir: WorkdirOpt = Path(".specfleet"),
    db: DbOpt = None,
):
    """The chosen depth and draft tree per pairing (the active tuned config), from the database."""
    store = read_store(workdir, db)
    try:
        rows = store.with_tree_checks(store.best(target=target, drafter=drafter, history=history))
        if by_category:
            rows = store.with_categories(rows)
    finally:
        store.close()
    from pipeline.report.plots import best_table, console_category_table

    if by_category and not as_json and rows and not any(r["categories"] for r in rows):
        err.print(
            "no depths per category: the prompts had no categories (give evaluation.prompts a file whose "
            "records have a category field)"
        )
        raise typer.Exit(1)
    table = (lambda: console_category_table(rows)) if by_category else (lambda: best_table(rows, versioned=True))
    _show(rows, as_json, "no tuned configs yet: run `specfleet run SPEC` first", table)


def speedups(
    target: Annotated[str | None, typer.Option("--target", help="Only this target.")] = None,
    drafter: Annotated[str | None, typer.Option("--drafter", help="Only this drafter.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows (one per depth) as a JSON list.")] = False,
    workdir: WorkdirOpt = Path(".specfleet"),
    db: DbOpt = None,
):
    """Predicted vs measured speedup per depth, from the engine benchmarks in the database: specfleet's
    engine, and a serving engine's checks (per batch size, with the config autotune prints)."""
    store = read_store(workdir, db)
    try:
        rows = store.speedup_checks(target=target, drafter=drafter)
        ours = [] if as_json else _benchmarks(store, [r for r in rows if r["engine"] == "specfleet"])
        served = [] if as_json else _benchmarks(store, [r for r in rows if r["engine"] != "specfleet"])
    finally:
        store.close()

    def tables():
        from rich.console import Group

        from pipeline.report.plots import engine_tables
        from pipeline.report.serving_table import serving_tables

        parts = ([engine_tables(ours)] if ours else []) + ([serving_tables(served)] if served else [])
        return Group(*parts)

    _show(
        rows,
        as_json,
        "no engine benchmarks yet: add a `validation:` (or `serving:`) section to the spec and run it",
        tables,
    )


def _benchmarks(store, rows: list[dict]) -> list[tuple[str, str, object]]:
    """(target, drafter, check) of each benchmark job that has rows, in row order: specfleet's engine
    (a measure_speedup job's SpeedupCheck) or a serving engine (a serve_check job's ServingCheck)."""
    from pipeline.run.record import finished

    first: dict[str, dict] = {}
    for r in rows:
        first.setdefault(r["job_hash"], r)
    found = []
    for job_hash, row in first.items():
        ours = row["engine"] == "specfleet"
        result = finished(store, "measure_speedup" if ours else "serve_check", job_hash)
        if result is None:  # re-running right now: its old rows stay until it finishes
            err.print(f"skipped {row['target']}/{row['drafter']}: its benchmark job is not finished")
            continue
        found.append((row["target"], row["drafter"], result.speedup_check if ours else result.serving_check))
    return found


def _show(rows: list[dict], as_json: bool, none_yet: str, table) -> None:
    """Rows as a JSON list, or as the table `table()` builds; none at all is an error on the table."""
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
        return
    if not rows:
        err.print(none_yet)
        raise typer.Exit(1)
    out.print(table())
