"""The commands that show results: `specfleet drift` (drafters compared by depth, as Markdown),
`specfleet report` (pages of stored results: HTML with its figures inside, PNGs and tables.md beside it,
also logged to the experiment's MLflow run), `specfleet bench` (what specfleet costs to run) and
`specfleet fleet-sim` (what orchestrating a fleet costs as it grows)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli.common import DbOpt, MlflowOpt, WorkdirOpt, err, mlflow_uri, out, output_folder, read_store
from pipeline.errors import UserError


def drift(
    experiment: Annotated[
        str | None, typer.Option("--experiment", help="Experiment name (default: the newest).")
    ] = None,
    condition: Annotated[
        str | None,
        typer.Option("--condition", help="Condition for the per-depth tables (default: the experiment's first)."),
    ] = None,
    depth: Annotated[int, typer.Option("--depth", help="Depth at which accept_len is compared across conditions.")] = 8,
    plot: Annotated[Path | None, typer.Option("--plot", help="Also write the per-depth plot here (PNG).")] = None,
    workdir: WorkdirOpt = Path(".specfleet"),
    db: DbOpt = None,
):
    """Drafters compared by depth (drift diagnostics; cond_accept, survival, accept_len, decode_accept_len) and
    accept_len by condition, as Markdown tables."""
    from pipeline.report import findings

    store = read_store(workdir, db)
    try:
        curves, diags = findings.experiment_rows(store, experiment)
    finally:
        store.close()
    if not curves:
        raise UserError(f"--experiment: no measured curves for {experiment or 'any experiment'}")
    conditions = findings.ordered_conditions(curves)
    condition = condition or conditions[0]
    t0 = min(r["temperature"] for r in curves)  # per-depth tables at the lowest temperature measured
    from pipeline.core.types import DRIFT_NAMES

    for name in DRIFT_NAMES:
        values = findings.diagnostic_by_depth(diags, name=name, condition=condition, temperature=t0)
        if values:
            out.print(
                findings.markdown_depth_table(values, f"{name} ({condition}, T={t0:g})") + "\n",
                markup=False,
                soft_wrap=True,
            )
    for column in ("cond_accept", "survival", "accept_len", "decode_accept_len"):
        values = findings.curve_by_depth(curves, column=column, condition=condition, temperature=t0)
        if values:
            out.print(
                findings.markdown_depth_table(values, f"{column} ({condition}, T={t0:g})") + "\n",
                markup=False,
                soft_wrap=True,
            )
    for temperature in sorted({r["temperature"] for r in curves}):
        table = findings.accept_len_by_condition(curves, temperature=temperature, depth=depth)
        out.print(
            f"accept_len({depth}) by condition, T={temperature:g}, change against {conditions[0]}:",
            markup=False,
            soft_wrap=True,
        )
        out.print(
            findings.markdown_condition_table(table, conditions, conditions[0]) + "\n", markup=False, soft_wrap=True
        )
    if plot is not None:
        temperature = min(r["temperature"] for r in curves)
        findings.plot_findings(
            curves, diags, condition=condition, temperature=temperature, path=plot, title=experiment or "drift"
        )
        out.print(f"plot: {plot}")


def report(
    experiment: Annotated[str, typer.Argument(help="Experiment name (its newest run).")],
    other: Annotated[str | None, typer.Argument(help="A second experiment to compare it with.")] = None,
    folder: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Folder for report.html, its PNGs and tables.md (default: <workdir>/reports/<experiment>)."
        ),
    ] = None,
    workdir: WorkdirOpt = Path(".specfleet"),
    db: DbOpt = None,
    mlflow: MlflowOpt = None,
):
    """One HTML page of an experiment's stored results: a summary per pairing in words, tuned configs,
    acceptance and speedup by depth with bootstrap intervals, drift diagnostics, conditions, trees,
    and the provenance at the end. With OTHER, the two compared."""
    from pipeline.report.data import load_experiment
    from pipeline.report.page import comparison_page, experiment_page, slug
    from pipeline.run.tracking import Tracker

    store = read_store(workdir, db)
    try:
        record = load_experiment(store, experiment)
        second = load_experiment(store, other) if other is not None else None
    finally:
        store.close()
    name = slug(experiment) + (f"_vs_{slug(other)}" if other is not None else "")
    folder = folder or workdir / "reports" / name
    output_folder(folder)  # a folder that cannot be written fails before MLflow is opened
    tracker = Tracker(*mlflow_uri(workdir, mlflow)) if record.mlflow_run_id else None
    if tracker is not None:
        tracker.check()  # a bad --mlflow fails before anything is drawn
    page = comparison_page(record, second, folder) if second else experiment_page(record, folder)
    html = page.write(f"specfleet report: {experiment}" + (f" against {other}" if other else ""))
    out.print(f"report: {html} ({len(page.figures)} figures; tables: {folder / 'tables.md'})", soft_wrap=True)
    if tracker is not None:
        where = "report" if second is None else f"report-vs-{slug(other)}"
        for path in (html, folder / "tables.md", *page.figures):
            tracker.log_artifact(record.mlflow_run_id, path, where)
        out.print(f"logged to MLflow run {record.mlflow_run_id} under {where}/", soft_wrap=True)
    else:
        err.print(f"experiment {experiment} has no MLflow run: the report is only in {folder}")


def bench(
    spec: Annotated[Path, typer.Option("--spec", help="The experiment measured on.")] = Path("experiments/bench.yaml"),
    folder: Annotated[Path, typer.Option("--out", help="Folder for bench.json and bench.md.")] = Path("bench-results"),
    jobs: Annotated[
        int, typer.Option("--jobs", min=1, max=100_000, help="Tiny jobs for the orchestration overhead.")
    ] = 200,
    train_steps: Annotated[
        int, typer.Option("--train-steps", min=2, max=10_000, help="Training steps timed per TTT depth.")
    ] = 20,
    workdir: WorkdirOpt = Path(".specfleet-bench"),
):
    """What specfleet costs to run, side by side: the curve against a per-depth sweep, the engine against
    HF generate, autotune against brute force, orchestration overhead, training speed. Not a test."""
    from pipeline.bench.suite import run_bench
    from pipeline.spec import load_spec

    load_spec(spec)  # a refused spec makes no output folder
    output_folder(folder)
    run_bench(
        spec=spec,
        workdir=workdir,
        out=folder,
        jobs=jobs,
        ttt_depths=(1, 2, 4, 8),
        train_steps=train_steps,
        log=lambda line: err.print(line, markup=False, soft_wrap=True, highlight=False),
    )
    out.print((folder / "bench.md").read_text(), markup=False, soft_wrap=True)
    out.print(f"bench: {folder / 'bench.json'}, {folder / 'bench.md'}")


def fleet_sim(
    sizes: Annotated[
        str,
        typer.Option("--sizes", help="Fleet sizes in pairings, comma-separated (targets x drafters, each at most 64)."),
    ] = "10,100,1000",
    executors: Annotated[str, typer.Option("--executors", help="local (in process), ray, or both.")] = "local,ray",
    postgres: Annotated[
        str | None,
        typer.Option(
            "--postgres",
            help="A PostgreSQL server URL: each run also gets a fresh database there (dropped afterwards).",
        ),
    ] = None,
    folder: Annotated[Path, typer.Option("--out", help="Folder for fleet.json, fleet.md and fleet.png.")] = Path(
        "fleet-results"
    ),
    workdir: WorkdirOpt = Path(".specfleet-fleet"),
):
    """What orchestrating a fleet costs as it grows: fleets of instant jobs planned, scheduled and recorded
    in MLflow and the database, on the in-process executor and on Ray. Not a test."""
    import json

    from pipeline.bench.fleet_sim import check_server, fleet_spec, plot, simulate, table

    try:
        counts = tuple(int(s) for s in sizes.split(","))
    except ValueError:
        raise UserError(f"--sizes: {sizes!r}; give whole numbers of pairings, comma-separated") from None
    try:
        for n in counts:
            fleet_spec(n)
    except ValueError as exc:
        raise UserError(f"--sizes: {exc}") from None
    chosen = tuple(e.strip() for e in executors.split(","))
    unknown = [e for e in chosen if e not in ("local", "ray")]
    if unknown or not chosen:
        raise UserError(f"--executors: {', '.join(unknown) or executors!r}; use local, ray or both")
    if postgres:
        check_server(postgres)
    output_folder(folder)
    output_folder(workdir, "--workdir")
    rows = simulate(
        counts,
        executors=chosen,
        postgres=postgres,
        workdir=workdir,
        log=lambda line: err.print(line, markup=False, soft_wrap=True, highlight=False),
    )
    (folder / "fleet.json").write_text(json.dumps(rows, indent=1) + "\n")
    (folder / "fleet.md").write_text(table(rows))
    plot(rows, folder / "fleet.png")
    out.print(table(rows), markup=False, soft_wrap=True)
    out.print(f"fleet simulation: {folder / 'fleet.json'}, {folder / 'fleet.md'}, {folder / 'fleet.png'}")
