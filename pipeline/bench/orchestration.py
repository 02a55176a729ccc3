"""The orchestration part of the benchmark: what running a job through specfleet costs, per job.

The same N select_depth jobs (real and torch-free: pipeline/core/select.py) run three ways:
(a) through the executor (`pipeline.run.executor.run_plan`) on a local Ray cluster started as `specfleet
run` starts one (`pipeline.run.ray_cluster.connect`), each job a Ray task through the real worker dispatch,
recorded in MLflow and the database; (b) through the same executor on the in-process cluster
(`pipeline.run.local_cluster.LocalCluster`), recorded the same way; (c) in a loop, nothing recorded. (b) and (c)
call the kind's function as the registry names it, not the worker dispatch, which would set torch's
threads in the calling process. A select job is well under a millisecond of arithmetic, so the
per-job difference of (a) or (b) over (c) is what the orchestration adds: scheduling, MLflow runs,
metrics and plots, database rows and, on Ray, the tasks' round trips. It says what a plan of many
small jobs costs beyond their work.

The plan comes from the real planner: one pairing of a target and a draft model named by hub ids
(never loaded: nothing here trains or measures), whose measure_curve and profile_cost jobs are
recorded finished first (from the given results, through the same executor and recorders), so the
timed run reuses them and runs only select jobs; its select_depth job is repeated with seeds
0..N-1, N distinct jobs (the seed is in the hash) on the same two small inputs. Each executor mode
runs in a fresh work directory of its own (SQLite database and MLflow store, laid out as `specfleet
run` lays them out), so neither reuses the other's results.

Timed: the running of each plan only. Starting the Ray cluster is reported apart as ray_start_s and
its shutdown not at all; the stores are created and the inputs recorded before the clock starts.
Ray's time does include its workers' first imports (torch, through the worker dispatch), which
every run on a fresh cluster pays.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import yaml

from pipeline.core.contracts import Measured, Profiled
from pipeline.core.kinds import kind as job_kind
from pipeline.core.kinds import resolve
from pipeline.plan import Job, Plan, build_plan, job_hash
from pipeline.run.local_cluster import LocalCluster
from pipeline.spec import ExperimentSpec, parse_spec

CODE_VERSION = "orchestration-bench"  # one version for every job: the jobs' code does not change mid-run
EXECUTOR_MODES = ("local", "ray")


def orchestration_bench(
    workdir: Path,
    *,
    jobs: int = 200,
    measured: Measured,
    profiled: Profiled,
    log: Callable[[str], None] = print,
    ray: bool = True,
) -> dict:
    """Run `jobs` select_depth jobs on `measured` and `profiled` directly, through the executor in
    process and through it on a new local Ray cluster; their times (s), per job (ms) and the
    executor's overhead per job over the direct loop (ms, and as a share of the direct per-job
    time). `ray_start_s` is the cluster's start-up, not in `ray_s`. Each executor mode writes in a
    new folder of `workdir` (local-*, ray-*), kept for a look at what it recorded. `ray=False`
    leaves Ray out (its keys are then None)."""
    if jobs < 1:
        raise ValueError(f"jobs: {jobs}, need at least 1")
    Path(workdir).mkdir(parents=True, exist_ok=True)
    # never an earlier run's folder: its finished jobs would be reused, and nothing timed
    folders = {
        mode: Path(tempfile.mkdtemp(prefix=f"{mode}-", dir=workdir)) for mode in EXECUTOR_MODES if ray or mode != "ray"
    }
    spec, text = _spec(measured)
    inputs, plan = _plans(spec, jobs)
    given = {inputs.jobs[0].hash: measured, inputs.jobs[1].hash: profiled}
    seconds = {"direct": _direct(plan, given)}
    log(f"orchestration: direct loop, {jobs} select_depth jobs in {seconds['direct']:.3g} s")
    bench = dict(spec=spec, text=text, inputs=inputs, plan=plan, given=given)
    seconds["local"] = _recorded(folders["local"], lambda: LocalCluster(_run_kind), **bench)
    log(f"orchestration: executor in process, {jobs} jobs in {seconds['local']:.2f} s")
    start = None
    if ray:
        start, seconds["ray"] = _on_ray(folders["ray"], bench)
        log(f"orchestration: executor on Ray (started in {start:.1f} s), {jobs} jobs in {seconds['ray']:.2f} s")
    return {**_per_job(jobs, seconds), "ray_start_s": start}


def _spec(measured: Measured) -> tuple[ExperimentSpec, str]:
    """The spec of one pairing that trains nothing: its jobs are measure_curve, profile_cost and
    select_depth (max_depth is the given curve's, so the upstream configs describe those results)."""
    data = {
        "name": "orchestration-bench",
        "targets": [{"name": "target", "hf": "specfleet-bench/target"}],
        "drafters": [{"name": "draft", "kind": "standalone", "hf": "specfleet-bench/draft"}],
        "evaluation": {"max_depth": measured.primary.curve.max_depth},
    }
    text = yaml.safe_dump(data, sort_keys=False)
    return parse_spec(text, "<orchestration bench>"), text


def _plans(spec: ExperimentSpec, n: int) -> tuple[Plan, Plan]:
    """(the plan of the select jobs' inputs, the benchmark's plan: those inputs and n select jobs)."""
    planned = build_plan(spec, CODE_VERSION)
    upstream = tuple(j for j in planned.jobs if j.kind != "select_depth")
    (select,) = [j for j in planned.jobs if j.kind == "select_depth"]
    assert [j.kind for j in upstream] == ["measure_curve", "profile_cost"], "the spec trains nothing"
    selects = tuple(_reseeded(select, seed) for seed in range(n))
    return replace(planned, jobs=upstream), replace(planned, jobs=upstream + selects)


def _reseeded(job: Job, seed: int) -> Job:
    """The same job with another seed, hashed as the planner hashes it."""
    config = job.config.model_copy(update={"seed": seed})
    return replace(
        job,
        config=config,
        name=f"{job.name} seed {seed}",
        hash=job_hash(job.kind, config.hashed(), dict(job.deps), CODE_VERSION),
    )


def _run_kind(kind: str, config, inputs: dict, *, num_cpus: float, num_gpus: float, progress, **_):
    """A job as the kind registry runs it, without the worker dispatch's torch set-up: what the
    direct loop calls, and what the in-process cluster runs."""
    return resolve(job_kind(kind).run)(config, inputs, num_gpus=num_gpus, progress=progress)


def _direct(plan: Plan, given: dict) -> float:
    """Seconds the plan's select jobs take called one after another: no executor, no stores."""
    selects = [j for j in plan.jobs if j.hash not in given]
    resolve(job_kind(selects[0].kind).run)  # imported before the clock starts
    t0 = time.perf_counter()
    for job in selects:
        _run_kind(
            job.kind,
            job.config,
            {name: given[h] for name, h in job.deps},
            num_cpus=job.num_cpus,
            num_gpus=job.num_gpus,
            progress=lambda step, total, loss: None,
        )
    return time.perf_counter() - t0


def _answering(given: dict) -> LocalCluster:
    """The in-process cluster answering the inputs' jobs with the given results."""
    # a job's hash is not passed to a runner: its kind tells the two inputs apart
    by_kind = {type(result): result for result in given.values()}

    def runner(kind, config, inputs, **_):
        return by_kind[job_kind(kind).result]

    return LocalCluster(runner)


def _on_ray(folder: Path, bench: dict) -> tuple[float, float]:
    """(seconds Ray took to start, seconds the plan took on it)."""
    from pipeline.run.ray_cluster import connect

    t0 = time.perf_counter()
    cluster = connect(None, {})  # on loopback, with a port of its own (never a `ray start` cluster's)
    started = time.perf_counter() - t0
    try:
        # run_plan closes the cluster it is given: a copy that does not own Ray keeps it up until
        # the clock has stopped, so the shutdown is not timed (the start-up is not either)
        return started, _recorded(folder, lambda: replace(cluster, started_here=False), **bench)
    finally:
        cluster.close()


def _recorded(
    folder: Path, connect: Callable, *, spec: ExperimentSpec, text: str, inputs: Plan, plan: Plan, given: dict
) -> float:
    """Seconds `plan` takes through the executor in the new work directory `folder`, once its
    inputs are recorded there; raises unless every select job ran and was recorded."""
    from rich.console import Console

    from db.store import Store
    from pipeline.cli.common import workdir_stores
    from pipeline.run.executor import run_plan
    from pipeline.run.tracking import Tracker

    # the URLs `specfleet run` makes for a work directory, never $SPECFLEET_DB or $MLFLOW_TRACKING_URI:
    # a benchmark writes only into its own folder
    db, mlflow, artifacts = workdir_stores(folder)
    store = Store(db)
    tracker = Tracker(mlflow, artifacts)
    quiet = Console(quiet=True)  # the progress view's drawing is the terminal's cost, not the executor's
    run = dict(spec=spec, spec_text=text, store=store, tracker=tracker, workdir=folder, console=quiet)
    try:
        seeded = run_plan(inputs, connect=lambda: _answering(given), **run)
        _check(seeded, len(inputs.jobs), 0)
        t0 = time.perf_counter()
        summary = run_plan(plan, connect=connect, **run)
        seconds = time.perf_counter() - t0
    finally:
        store.close()
    _check(summary, len(plan.jobs) - len(inputs.jobs), len(inputs.jobs))
    return seconds


def _check(summary, ran: int, reused: int) -> None:
    """A run that failed or reran anything would time something else than asked: refuse its numbers."""
    if summary.failed:
        raise RuntimeError(
            f"orchestration bench: {len(summary.failed)} job(s) failed, e.g. {next(iter(summary.failed.values()))}"
        )
    if (len(summary.done), len(summary.cached)) != (ran, reused):
        raise RuntimeError(
            f"orchestration bench: {len(summary.done)} job(s) ran and {len(summary.cached)} were "
            f"reused, expected {ran} and {reused}"
        )


def _per_job(n: int, seconds: dict[str, float]) -> dict:
    """Totals, per-job times and the executor modes' overheads over the direct loop."""
    out: dict = {"jobs": n}
    for mode in ("direct", *EXECUTOR_MODES):
        s = seconds.get(mode)
        out[f"{mode}_s"] = s
        out[f"{mode}_ms_per_job"] = None if s is None else s * 1000 / n
    direct = out["direct_ms_per_job"]
    for mode in EXECUTOR_MODES:
        per_job = out[f"{mode}_ms_per_job"]
        overhead = None if per_job is None else per_job - direct
        out[f"{mode}_overhead_ms"] = overhead
        out[f"{mode}_overhead_share"] = None if overhead is None else overhead / direct
    return out
