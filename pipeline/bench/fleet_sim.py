"""The fleet simulation: what orchestrating a fleet costs as the fleet grows, its jobs taking no time.

A fleet of N pairings (targets named by hub ids, never loaded, times EAGLE-3 drafters: see
`fleet_spec`) is planned by the real planner and run by the real executor, every job
answered at once (pipeline/bench/instant_jobs.py): 4 jobs per pairing (train_drafter, measure_curve,
profile_cost, select_depth), recorded in MLflow and the database as any run is. What is timed is
therefore specfleet's own cost: planning, claiming, scheduling, recording. It runs on the
in-process executor and on a local Ray cluster (one, started once and not timed), each against
SQLite and, when given a server, a fresh PostgreSQL database per run; MLflow is a SQLite store in
the run's own folder, as `specfleet run` makes one.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import yaml

from pipeline.plan import build_plan
from pipeline.run.local_cluster import LocalCluster
from pipeline.spec import ExperimentSpec, parse_spec

CODE_VERSION = "fleet-sim"
MEMBERS = 64  # targets, and drafters, a spec may name
RUNNER = "pipeline.bench.instant_jobs:instant_job"


def fleet_spec(pairings: int) -> tuple[ExperimentSpec, str]:
    """The spec of a fleet of `pairings`: as many drafters per target as divide it, up to the spec's
    64 (10 pairings: 1 x 10; 100: 2 x 50; 1,000: 20 x 50)."""
    drafters = max(d for d in range(1, MEMBERS + 1) if pairings % d == 0) if pairings >= 1 else 0
    if pairings < 1 or pairings // drafters > MEMBERS:
        raise ValueError(
            f"pairings: {pairings}; give a number of targets times a number of drafters, each at most {MEMBERS}"
        )
    data = {
        "name": f"fleet-{pairings}",
        "targets": [{"name": f"t{i}", "hf": f"specfleet-sim/target-{i}"} for i in range(pairings // drafters)],
        # drafters that differ in what they train, so each pairing's jobs are its own
        "drafters": [{"name": f"d{j}", "kind": "eagle3", "train": {"steps": 1 + j}} for j in range(drafters)],
        "evaluation": {"max_depth": 2},
    }
    text = yaml.safe_dump(data, sort_keys=False)
    return parse_spec(text, f"<fleet of {pairings}>"), text


def simulate(
    sizes: tuple[int, ...],
    *,
    executors: tuple[str, ...] = ("local", "ray"),
    postgres: str | None = None,
    workdir: Path,
    log: Callable[[str], None] = print,
    keep: bool = False,
) -> list[dict]:
    """One row per executor, database and fleet size: jobs, planning and running seconds, per-job
    milliseconds. Every run writes into a new folder of `workdir` (and a new PostgreSQL database),
    removed afterwards unless `keep`."""
    Path(workdir).mkdir(parents=True, exist_ok=True)
    databases = ("sqlite", "postgresql") if postgres else ("sqlite",)
    rows = []
    for executor in executors:
        with _cluster(executor) as connect:
            for database in databases:
                for n in sizes:
                    folder = Path(tempfile.mkdtemp(dir=workdir))
                    try:
                        with _database(database, postgres) as url:
                            row = _one(n, executor, database, url, connect, folder)
                    finally:
                        if not keep:
                            shutil.rmtree(folder, ignore_errors=True)
                    log(
                        f"fleet: {n} pairings ({row['jobs']} jobs), {executor} executor, {database}: planned in "
                        f"{row['plan_s']:.2f} s, ran in {row['run_s']:.1f} s, {row['ms_per_job']:.1f} ms per job"
                    )
                    rows.append(row)
    return rows


def _one(n: int, executor: str, database: str, db_url: str | None, connect: Callable, folder: Path) -> dict:
    from rich.console import Console

    from db.store import Store
    from pipeline.cli.common import workdir_stores
    from pipeline.run.executor import run_plan
    from pipeline.run.tracking import Tracker

    spec, text = fleet_spec(n)
    sqlite_db, mlflow, artifacts = workdir_stores(folder)
    store, tracker = Store(db_url or sqlite_db), Tracker(mlflow, artifacts)
    try:
        t0 = time.perf_counter()
        plan = build_plan(spec, CODE_VERSION)
        planned = time.perf_counter()
        summary = run_plan(
            plan,
            spec=spec,
            spec_text=text,
            store=store,
            tracker=tracker,
            workdir=folder,
            connect=connect,
            console=Console(quiet=True),
        )
        ran = time.perf_counter()
    finally:
        store.close()
    if summary.failed or len(summary.done) != len(plan.jobs):
        raise RuntimeError(
            f"fleet simulation: {len(summary.done)} of {len(plan.jobs)} jobs ran, "
            f"{len(summary.failed)} failed: {next(iter(summary.failed.values()), '')}"
        )
    return {
        "executor": executor,
        "database": database,
        "pairings": n,
        "jobs": len(plan.jobs),
        "plan_s": planned - t0,
        "run_s": ran - planned,
        "ms_per_job": (ran - t0) * 1000 / len(plan.jobs),
    }


@contextmanager
def _cluster(executor: str) -> Iterator[Callable]:
    """A function returning the cluster to run on; a Ray cluster is started once, here, untimed."""
    from pipeline.bench.instant_jobs import instant_job

    if executor == "local":
        yield lambda: LocalCluster(instant_job)
        return
    if executor != "ray":
        raise ValueError(f"executors: {executor!r}; use local or ray")
    from pipeline.run.ray_cluster import ProgressBoard, connect

    cluster = connect(None, {})
    cluster.runner = RUNNER
    try:  # run_plan closes what it is given: a copy that does not own Ray leaves it up for the next run,
        # with a progress board of its own (a shared one would hand each run every earlier run's jobs)
        yield lambda: replace(cluster, started_here=False, logs={}, board=ProgressBoard.remote())
    finally:
        cluster.close()


def check_server(postgres: str) -> None:
    """A UserError naming --postgres unless that server takes a connection and may create databases
    (each PostgreSQL run gets a fresh one)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from db.errors import one_line
    from pipeline.errors import UserError

    try:
        engine = create_engine(postgres)
    except (ArgumentError, ImportError, ValueError) as exc:
        raise UserError(f"--postgres: {postgres!r} is not a database URL this install can open: {exc}") from None
    if engine.dialect.name != "postgresql":
        raise UserError(f"--postgres: {engine.url.render_as_string()} is {engine.dialect.name}, not PostgreSQL")
    try:
        with engine.connect() as conn:
            if not conn.execute(
                text("SELECT rolcreatedb OR rolsuper FROM pg_roles WHERE rolname = current_user")
            ).scalar():
                raise UserError(f"--postgres: the user of {engine.url.render_as_string()} may not create databases")
    except SQLAlchemyError as exc:
        raise UserError(f"--postgres: cannot connect to {engine.url.render_as_string()}: {one_line(exc)}") from None
    finally:
        engine.dispose()


@contextmanager
def _database(kind: str, postgres: str | None) -> Iterator[str | None]:
    """None for the run folder's SQLite file; a new PostgreSQL database on the server `postgres`,
    dropped afterwards."""
    if kind == "sqlite":
        yield None
        return
    from sqlalchemy import create_engine, make_url, text

    admin = create_engine(postgres, isolation_level="AUTOCOMMIT")
    name = f"specfleet_fleet_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(postgres).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def table(rows: list[dict]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| pairings | jobs | executor | database | planning (s) | run (s) | per job (ms) |",
        "|---:|---:|---|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['pairings']:,} | {r['jobs']:,} | {r['executor']} | {r['database']} | {r['plan_s']:.2f} | "
            f"{r['run_s']:.1f} | {r['ms_per_job']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> Path:
    """Wall time and time per job against the fleet's size, one line per executor and database."""
    from pipeline.report.plots import pyplot, save_figure

    plt = pyplot()
    fig, (total, per_job) = plt.subplots(1, 2, figsize=(9, 3.6))
    for key in dict.fromkeys((r["executor"], r["database"]) for r in rows):
        mine = sorted((r for r in rows if (r["executor"], r["database"]) == key), key=lambda r: r["pairings"])
        sizes = [r["pairings"] for r in mine]
        total.plot(sizes, [r["plan_s"] + r["run_s"] for r in mine], "o-", label=" / ".join(key))
        per_job.plot(sizes, [r["ms_per_job"] for r in mine], "o-", label=" / ".join(key))
    total.set(xscale="log", yscale="log", xlabel="pairings", ylabel="seconds", title="planning + running")
    per_job.set(xscale="log", xlabel="pairings", ylabel="ms per job", ylim=(0, None), title="per job")
    total.legend(fontsize=8)
    return save_figure(fig, path, "a fleet of instant jobs: what orchestration costs")
