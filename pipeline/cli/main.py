"""The `specfleet` command: validate, run, best, speedups, status, autotune; drift, report and bench
(pipeline/cli/results.py).

The CLI takes a spec path and switches that say where things live (work directory, database,
MLflow, Ray cluster); everything that changes results is in the spec.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from db.secrets import mask_secrets
from pipeline.cli import results as cli_results
from pipeline.cli.common import DbOpt, MlflowOpt, WorkdirOpt, db_url, err, mlflow_uri, open_store, out, read_store
from pipeline.errors import SpecError, UserError

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Tune speculative-decoding depth and draft trees across a fleet."
)


@app.command()
def validate(spec: Annotated[Path, typer.Argument(help="Experiment YAML.")]):
    """Check a spec; print every problem as `field.path: message (line N)`."""
    from pipeline.plan import build_plan
    from pipeline.spec import load_spec
    from pipeline.version import code_version

    parsed, _ = load_spec(spec)
    plan = build_plan(parsed, code_version)
    out.print(
        f"[green]ok[/green] {spec}: {len(parsed.targets)} target(s), {len(parsed.drafters)} drafter(s), "
        f"{len(parsed.pairing_list())} pairing(s), {len(plan.jobs)} jobs"
    )


@app.command()
def run(
    spec: Annotated[Path, typer.Argument(help="Experiment YAML.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan and stop.")] = False,
    address: Annotated[
        str | None,
        typer.Option("--address", help="Join this Ray cluster (default: $RAY_ADDRESS, else start one here)."),
    ] = None,
    runtime_env_json: Annotated[
        str | None,
        typer.Option(
            "--runtime-env",
            help='Ray runtime_env for the workers, as JSON: {"env_vars": {"HF_TOKEN": "..."}, '
            '"pip": [...]}; added to the spec\'s runtime_env section.',
        ),
    ] = None,
    retry_s: Annotated[
        float | None,
        typer.Option(
            "--retry-s",
            help="How long database and MLflow calls wait out an outage before the run stops "
            "(default: $SPECFLEET_DB_RETRY_S and $SPECFLEET_MLFLOW_RETRY_S, else 60).",
        ),
    ] = None,
    checkpoints: Annotated[
        str | None,
        typer.Option(
            "--checkpoints",
            help="Where jobs store trained models and data, by reference: a folder every node mounts, "
            "or a URI MLflow writes artifacts to (s3://, gs://, ...) (default: "
            "$SPECFLEET_CHECKPOINTS, else an MLflow server's artifact store, else the workdir).",
        ),
    ] = None,
    workdir: WorkdirOpt = Path(".specfleet"),
    db: DbOpt = None,
    mlflow: MlflowOpt = None,
):
    """Plan the spec's jobs and run them on Ray, logging to MLflow and the database."""
    from pipeline.spec import load_spec

    if retry_s is not None:
        _in_range("--retry-s", retry_s, 0, 86_400)
    parsed, text = load_spec(spec)
    from pipeline.run.runtime_env import from_cli, merged

    runtime_env = merged(parsed.runtime_env, from_cli(runtime_env_json))
    # a cluster to join, or a local one whose workers get a runtime_env of their own: started now,
    # as the timing jobs are planned for what its workers report
    joined = _ray_cluster(address, runtime_env) if address or os.environ.get("RAY_ADDRESS") or runtime_env else None
    try:
        plan = _plan(parsed, joined)
        if dry_run:
            _print_plan(plan, workdir, db)
            return
        _run(
            plan,
            parsed,
            text,
            workdir,
            db,
            mlflow,
            joined or (lambda: _ray_cluster(None, runtime_env)),
            retry_s,
            checkpoints or os.environ.get("SPECFLEET_CHECKPOINTS"),
        )
    finally:
        if joined is not None:
            joined.close()


def _plan(parsed, cluster):
    """The spec's plan, its timing jobs keyed by the worker `cluster` (None: this machine, whose
    interpreter the local cluster's workers run) gives them."""
    from pipeline.plan import build_plan
    from pipeline.run.probe import probe_worker
    from pipeline.version import code_version

    worker = probe_worker(parsed, cluster)
    err.print(
        f"timing jobs planned for {worker.device} (CUDA {worker.cuda}, driver {worker.driver}, torch "
        f"{worker.torch}, transformers {worker.transformers})",
        soft_wrap=True,
    )
    return build_plan(parsed, code_version, worker)


def _run(
    plan, parsed, text: str, workdir: Path, db, mlflow, cluster, retry_s: float | None, checkpoints: str | None = None
) -> None:
    """Run `plan` on `cluster` (a joined one, or a function starting the local one when needed)."""
    from pipeline.run.executor import run_plan
    from pipeline.run.summary import selected_rows, speedup_checks
    from pipeline.run.tracking import Tracker

    workdir.mkdir(parents=True, exist_ok=True)
    uri, artifacts = mlflow_uri(workdir, mlflow)
    tracker = Tracker(uri, artifacts, retry_s=retry_s)
    tracker.check()
    store = open_store(workdir, db, retry_s)
    try:
        summary = run_plan(
            plan,
            spec=parsed,
            spec_text=text,
            store=store,
            tracker=tracker,
            workdir=workdir,
            connect=cluster if callable(cluster) else lambda: cluster,
            console=err,
            checkpoints=checkpoints,
        )
        names = {j.hash: j.name for j in plan.jobs}
        out.print(
            f"experiment {parsed.name} (id {summary.experiment_id}, MLflow run {summary.mlflow_run_id}) on "
            f"{summary.cluster}: {len(summary.done)} ran, "
            + (f"{len(summary.recovered)} recorded from an earlier run, " if summary.recovered else "")
            + f"{len(summary.cached)} reused, "
            f"{len(summary.failed)} failed in {summary.seconds:.1f}s",
            soft_wrap=True,
        )
        if summary.report is not None:
            out.print(f"curves of every pairing: {summary.report}", soft_wrap=True)
        rows = selected_rows(plan, store)
        if rows:
            from pipeline.report.plots import best_table, console_category_table

            out.print(best_table(rows, versioned=False))
            if any(r["categories"] for r in rows):
                out.print(console_category_table(rows))
        checks = speedup_checks(plan, store)
        if checks:
            from pipeline.report.plots import engine_tables

            out.print(engine_tables(checks))
        for h, reason in summary.failed.items():
            err.print(f"[red]failed[/red] {names[h]}: {reason}")
        if summary.failed:
            raise typer.Exit(1)
    finally:
        store.close()


def _ray_cluster(address: str | None, runtime_env: dict):
    from pipeline.run.ray_cluster import connect  # ray is imported only when something runs

    return connect(address, runtime_env)


def _print_plan(plan, workdir: Path, db: str | None) -> None:
    from pipeline.run.summary import plan_table

    url = db_url(workdir, db)
    store = None
    if not url.startswith("sqlite:///") or Path(url.removeprefix("sqlite:///")).is_file():
        store = open_store(workdir, db)
    try:
        out.print(plan_table(plan, store))
    finally:
        if store is not None:
            store.close()


@app.command()
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


def _in_range(option: str, value: float, low: float, high: float, *, low_open: bool = False) -> None:
    """A finite number in [low, high] (or (low, high]), else a UserError naming the option."""
    if not math.isfinite(value) or value > high or value < low or (low_open and value == low):
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise UserError(f"{option}: {value:g} is outside {interval}")


def _show(rows: list[dict], as_json: bool, none_yet: str, table) -> None:
    """Rows as a JSON list, or as the table `table()` builds; none at all is an error on the table."""
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
        return
    if not rows:
        err.print(none_yet)
        raise typer.Exit(1)
    out.print(table())


@app.command()
def speedups(
    target: Annotated[str | None, typer.Option("--target", help="Only this target.")] = None,
    drafter: Annotated[str | None, typer.Option("--drafter", help="Only this drafter.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows (one per depth) as a JSON list.")] = False,
    workdir: WorkdirOpt = Path(".specfleet"),
    db: DbOpt = None,
):
    """Predicted vs measured speedup per depth, from the engine benchmarks in the database."""
    store = read_store(workdir, db)
    try:
        rows = store.speedup_checks(target=target, drafter=drafter)
        checks = [] if as_json else _benchmarks(store, rows)
    finally:
        store.close()
    from pipeline.report.plots import engine_tables

    _show(
        rows,
        as_json,
        "no engine benchmarks yet: add a `validation:` section to the spec and run it",
        lambda: engine_tables(checks),
    )


def _benchmarks(store, rows: list[dict]) -> list[tuple[str, str, object]]:
    """(target, drafter, speedup check) of each benchmark job that has rows, in row order."""
    from pipeline.run.record import finished

    first: dict[str, dict] = {}
    for r in rows:
        first.setdefault(r["job_hash"], r)
    found = []
    for job_hash, row in first.items():
        validated = finished(store, "measure_speedup", job_hash)
        if validated is None:  # re-running right now: its old rows stay until it finishes
            err.print(f"skipped {row['target']}/{row['drafter']}: its benchmark job is not finished")
            continue
        found.append((row["target"], row["drafter"], validated.speedup_check))
    return found


@app.command()
def status(
    job: Annotated[
        str | None,
        typer.Option(
            "--job",
            help="One job in full (its name or a hash prefix): state, owner and the whole traceback of a failure.",
        ),
    ] = None,
    workdir: WorkdirOpt = Path(".specfleet"),
    db: DbOpt = None,
):
    """Experiments and their jobs (a failed job's first error line; --job for all of it)."""
    store = read_store(workdir, db)
    try:
        if job is not None:
            _show_job(store.jobs(), job)
            return
        for exp in store.experiments():
            c = exp["job_counts"]
            out.print(
                f"[bold]{exp['name']}[/bold] id {exp['id']} spec {exp['spec_hash'][:10]} "
                f"created {exp['created_at']}: done {c['done']}, running {c['running']}, "
                f"pending {c['pending']}, failed {c['failed']}"
            )
            table = Table(show_header=True)
            for col in ("kind", "name", "status", "attempts", "seconds", "mlflow run", "error"):
                table.add_column(col)
            for j in store.jobs(exp["id"]):
                secs = f"{j['duration_s']:.1f}" if j["duration_s"] is not None else ""
                first = (j["error"] or "").split("\n", 1)[0] if j["status"] == "failed" else ""
                table.add_row(
                    j["kind"],
                    j["name"],
                    j["status"],
                    str(j["attempts"]),
                    secs,
                    j["mlflow_run_id"] or "",
                    Text(first[:100]),
                )  # plain text: an error may hold [brackets]
            out.print(table)
    finally:
        store.close()


def _show_job(jobs: list[dict], wanted: str) -> None:
    found = [j for j in jobs if j["name"] == wanted or j["job_hash"].startswith(wanted)]
    if len(found) != 1:
        raise UserError(
            f"--job: {len(found)} jobs match {wanted!r}"
            + (f" ({', '.join(j['name'] for j in found[:5])}); give more of the hash" if found else "")
        )
    j = found[0]
    for key in (
        "name",
        "kind",
        "job_hash",
        "status",
        "attempts",
        "duration_s",
        "started_at",
        "finished_at",
        "mlflow_run_id",
    ):
        sys.stdout.write(f"{key}: {j[key] if j[key] is not None else ''}\n")
    if j["error"]:
        sys.stdout.write("error:\n" + j["error"] + "\n")


@app.command()
def autotune(
    engine: Annotated[str, typer.Option("--engine", help="vllm | sglang | trtllm | transformers")],
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
    workdir: WorkdirOpt = Path(".specfleet"),
    db: DbOpt = None,
):
    """Print a ready engine config for one pairing: from its active tuned config, or from
    production metrics (stored as a new 'production' version)."""
    from pipeline.autotune import tuning as tune
    from pipeline.version import code_version

    if engine not in tune.ENGINES:
        raise UserError(f"--engine: unknown engine {engine!r}; use one of {', '.join(tune.ENGINES)}")
    tune.check_options(engine, engine_version, method, export_format, drafter_path)
    _in_range("--temperature", temperature, 0.0, 2.0)
    if cost_ratio is not None:
        _in_range("--cost-ratio", cost_ratio, 0.0, 1000.0, low_open=True)
    store = open_store(workdir, db)
    if from_metrics:
        try:
            name = drafter or (Path(drafter_path).name if drafter_path else None)
            if name is None or drafter_path is None:
                raise UserError("--drafter-path: name the deployed drafter (its path goes into the config)")
            path, method = tune.drafter_path(store, {"target": model, "drafter": name}, workdir, drafter_path, method)
            tune.check_options(engine, engine_version, method, export_format, path)  # before a version is stored
            row, report = tune.from_metrics(
                store,
                from_metrics,
                model_name=model,
                drafter=name,
                cost_ratio=cost_ratio,
                hardware=hardware,
                temperature=temperature,
                code_version=code_version(),
            )
        finally:
            store.close()
        err.print(
            f"stored production version {row['version']} for {row['target']}/{row['drafter']}: "
            f"depth {row['depth']}; {report}",
            markup=False,
            soft_wrap=True,
        )
        if not _speculates(row):
            return
        _print_config(
            tune.render(
                engine,
                tune.schedule_of(row),
                model=path,
                method=method,
                version=engine_version,
                config_dir=workdir / "engine-configs",
                draft_sampling=tune.sampling_of(row),
            )
        )
        return
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
    _print_config(
        tune.render(
            engine,
            tune.schedule_of(row),
            model=path,
            method=method,
            version=engine_version,
            config_dir=workdir / "engine-configs",
            draft_sampling=tune.sampling_of(row),
            tree=tune.tree_of(row),
        )
    )


def _print_config(emitted) -> None:
    """The config on stdout; what the engine release could not express, and files it reads, on stderr."""
    for note in emitted.notes:
        err.print(f"note: {note}", markup=False, soft_wrap=True)
    sys.stdout.write(emitted.text.rstrip("\n") + "\n")


def _speculates(row: dict) -> bool:
    """False, with a note, when the tuned depth is 0 at every batch size: then there is nothing to
    configure, and the engine's answer is to serve without a drafter (stdout stays empty)."""
    from pipeline.autotune.tuning import schedule_of, tree_of

    if max(k for _, _, k in schedule_of(row)) > 0 or tree_of(row):  # a tree can pay where no chain does
        return True
    err.print(
        f"{row['target']}/{row['drafter']}: depth 0 at every batch size, speculation does not pay "
        f"on {row.get('hardware') or 'this hardware'}; serve without speculative settings",
        markup=False,
        soft_wrap=True,
    )
    return False


app.command()(cli_results.drift)
app.command()(cli_results.report)
app.command()(cli_results.bench)
app.command("fleet-sim")(cli_results.fleet_sim)


def main() -> None:
    """Usage errors are typer's (exit 2); a spec or user error is printed as plain lines, no traceback."""
    try:
        app()
    except SpecError as exc:  # plain writes: rich would wrap long lines
        sys.stderr.write(f"{exc.source}: {len(exc.messages)} error(s)\n" + "".join(f"{m}\n" for m in exc.messages))
        sys.exit(exc.exit_code)
    except UserError as exc:
        sys.stderr.write(f"error: {mask_secrets(str(exc))}\n")
        sys.exit(exc.exit_code)
