"""The commands that plan and run experiments: `specfleet validate` (a spec's problems, or its plan's
size), `specfleet run` (the plan's jobs on Ray, logged to MLflow and the database) and `specfleet
status` (experiments and their jobs).

The CLI takes a spec path and switches that say where things live (work directory, database,
MLflow, Ray cluster); everything that changes results is in the spec.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from pipeline.cli.common import (
    DbOpt,
    MlflowOpt,
    WorkdirOpt,
    db_url,
    err,
    in_range,
    mlflow_uri,
    open_store,
    out,
    read_store,
)
from pipeline.errors import UserError


def validate(spec: Annotated[Path, typer.Argument(help="Experiment YAML.")]):
    """Check a spec, and what it loads as far as this machine can tell without loading it (hub ids
    cached or reachable, drafters' configs against their targets'); print every problem as
    `field.path: message (line N)`."""
    from pipeline.plan import build_plan
    from pipeline.spec import load_spec
    from pipeline.version import code_version

    parsed, text = load_spec(spec)
    check_offline(spec, parsed, text, parsed.runtime_env.env_vars if parsed.runtime_env is not None else {})
    plan = build_plan(parsed, code_version)
    out.print(
        f"[green]ok[/green] {spec}: {len(parsed.targets)} target(s), {len(parsed.drafters)} drafter(s), "
        f"{len(parsed.pairing_list())} pairing(s), {len(plan.jobs)} jobs"
    )


def check_offline(spec: Path, parsed, text: str, env_vars: dict) -> None:
    """Refuse, before anything runs, what this machine can tell will fail (a hub id neither cached nor
    reachable under the workers' hub settings, a drafter whose config does not fit its target's)."""
    from pipeline.core.hub_cache import HubAccess
    from pipeline.errors import SpecError
    from pipeline.offline_checks import offline_errors

    problems = offline_errors(parsed, text, HubAccess.for_workers(env_vars))
    if problems:
        raise SpecError(str(spec), problems)


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
        in_range("--retry-s", retry_s, 0, 86_400)
    parsed, text = load_spec(spec)
    from pipeline.run.runtime_env import from_cli, merged

    runtime_env = merged(parsed.runtime_env, from_cli(runtime_env_json))
    check_offline(spec, parsed, text, runtime_env.get("env_vars") or {})
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
    """Experiments and their jobs (a failed job's first error line; --job for all of it). A job
    recorded as running whose driver is gone or whose lease ran out shows as stale, with why."""
    from datetime import UTC, datetime

    from pipeline.run.abandoned import shown_status

    store = read_store(workdir, db)
    now = datetime.now(UTC)
    try:
        if job is not None:
            _show_job([{**j, "status": shown_status(j, now)} for j in store.jobs()], job)
            return
        for exp in store.experiments():
            jobs = store.jobs(exp["id"])
            shown = [shown_status(j, now) for j in jobs]
            stale = sum(s.startswith("stale: ") for s in shown)
            c = {s: sum(j["status"] == s for j in jobs) for s in ("done", "running", "pending", "failed")}
            out.print(
                f"[bold]{exp['name']}[/bold] id {exp['id']} spec {exp['spec_hash'][:10]} "
                f"created {exp['created_at']}: done {c['done']}, running {c['running'] - stale}, "
                + (f"stale {stale}, " if stale else "")
                + f"pending {c['pending']}, failed {c['failed']}"
            )
            table = Table(show_header=True)
            for col in ("kind", "name", "status", "attempts", "seconds", "mlflow run", "error"):
                table.add_column(col)
            for j, state in zip(jobs, shown):
                secs = f"{j['duration_s']:.1f}" if j["duration_s"] is not None else ""
                first = (j["error"] or "").split("\n", 1)[0] if j["status"] == "failed" else ""
                table.add_row(
                    j["kind"],
                    j["name"],
                    Text(state),
                    str(j["attempts"]),
                    secs,
                    j["mlflow_run_id"] or "",
                    Text(first[:100]),
                )  # plain text: an error may hold [brackets]
            out.print(table)
            if stale:
                out.print(Text(_resume_hint(exp["name"], stale)), soft_wrap=True)
    finally:
        store.close()


def _resume_hint(experiment: str, stale: int) -> str:
    return (
        f"{stale} stale job(s) of {experiment}: their driver is gone or stopped renewing its lease. Run "
        "its spec again (specfleet run SPEC) to resume: it takes them over, runs them again and reuses "
        "every finished job."
    )


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
        "owner",
        "lease_until",
    ):
        sys.stdout.write(f"{key}: {j[key] if j[key] is not None else ''}\n")
    if j["error"]:
        sys.stdout.write("error:\n" + j["error"] + "\n")
