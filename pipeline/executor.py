"""Executing a plan: reuse finished jobs, run the rest on Ray, record each as it finishes.

Order of events for a spec: connect to Ray and check resources (a refused spec writes
nothing), then open the experiment in the database and MLflow, submit every job that is not
already finished, and record results as they arrive.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.plan import Job, Plan
from pipeline.progress import ProgressView
from pipeline.record import db_extras, load_checkpoint, log_job, stored_result
from pipeline.report import plot_comparison
from pipeline.tracking import Tracker
from pipeline.types import Curve


@dataclass
class RunSummary:
    experiment_id: int
    mlflow_run_id: str
    cluster: str
    cached: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    report: Path | None = None  # the plot of every pairing's curve


@dataclass
class Context:
    plan: Plan
    store: object
    tracker: Tracker
    checkpoints: Path
    experiment_id: int = 0
    mlflow_experiment: str = ""
    parent_run: str = ""


def run_plan(plan: Plan, *, spec, spec_text: str, store, tracker: Tracker, workdir: Path,
             address: str | None, console) -> RunSummary:
    from pipeline import cluster as ray_cluster  # ray is imported only when something runs

    t0 = time.perf_counter()
    ctx = Context(plan, store, tracker, workdir / "checkpoints")
    reusable = _reusable(ctx)
    if len(reusable) == len(plan.jobs):  # nothing to run: no cluster needed
        summary = _open_experiment(ctx, spec, spec_text, "no cluster needed")
        summary.cached = list(reusable)
        summary.report = _report(ctx, workdir / "reports" / f"{spec.name}-curves.png", spec.name)
        tracker.end(ctx.parent_run, ok=True)
        summary.seconds = time.perf_counter() - t0
        return summary
    requests = {j.kind: (j.num_cpus, j.num_gpus) for j in plan.jobs if j.hash not in reusable}
    cl = ray_cluster.connect(address)
    try:
        about = ray_cluster.check_resources(requests)
        summary = _open_experiment(ctx, spec, spec_text, about)
        _execute(ctx, cl, summary, reusable, console)
        summary.report = _report(ctx, workdir / "reports" / f"{spec.name}-curves.png", spec.name)
        tracker.end(ctx.parent_run, ok=not summary.failed)
    finally:
        cl.close()
    summary.seconds = time.perf_counter() - t0
    return summary


def _open_experiment(ctx: Context, spec, spec_text: str, about: str) -> RunSummary:
    plan = ctx.plan
    ctx.experiment_id = ctx.store.ensure_experiment(
        name=spec.name, spec_hash=plan.spec_hash, spec_yaml=spec_text, code_version=plan.code_version)
    ctx.mlflow_experiment, ctx.parent_run = ctx.tracker.parent_run(
        experiment=f"specfleet/{spec.name}", spec_hash=plan.spec_hash,
        params=spec.model_dump(mode="json"), tags={"specfleet.code_version": plan.code_version},
    )
    ctx.store.set_experiment_run(ctx.experiment_id, ctx.parent_run)
    for job in plan.jobs:
        ctx.store.link_job(ctx.experiment_id, job_hash=job.hash, kind=job.kind, name=job.name, config=job.config)
    return RunSummary(ctx.experiment_id, ctx.parent_run, about)


def _report(ctx: Context, path: Path, name: str) -> Path | None:
    """Plot every measured curve of the plan together; log it to the experiment's parent run."""
    curves = {}
    for job in ctx.plan.jobs:
        stored = ctx.store.finished_result(job.hash) if job.kind == "measure_curve" else None
        if stored is not None:
            curves[f"{job.target} / {job.drafter}"] = Curve.from_dict(stored["curves"][0])
    if not curves:
        return None
    plot_comparison(curves, path, f"{name}: acceptance vs depth")
    ctx.tracker.log_artifact(ctx.parent_run, path)
    return path


def _reusable(ctx: Context) -> dict[str, dict]:
    """Finished jobs whose results (and checkpoints) are still there."""
    out = {}
    for job in ctx.plan.jobs:
        stored = ctx.store.finished_result(job.hash)
        if stored is None:
            continue
        if "checkpoint_dir" in stored and not Path(stored["checkpoint_dir"]).is_dir():
            continue  # the work directory lost it: run the job again
        out[job.hash] = stored
    return out


def _execute(ctx: Context, cl, summary: RunSummary, reusable: dict[str, dict], console) -> None:
    jobs = ctx.plan.by_hash()
    submitted: dict[str, object] = {}  # job hash -> result ref of a job that runs now
    reused_refs: dict[str, object] = {}  # job hash -> ref of a reused result put in the object store
    for job in ctx.plan.jobs:  # dependencies come first
        if job.hash in reusable:
            summary.cached.append(job.hash)
            continue
        deps = {name: _input_ref(cl, h, submitted, reused_refs, reusable) for name, h in job.deps}
        submitted[job.hash] = cl.submit(job, deps)
    view = ProgressView(console, jobs, cached=set(summary.cached))
    runs: dict[str, str] = {}
    pending = {ref: h for h, ref in submitted.items()}
    try:
        with view:
            while pending:
                done = cl.wait(list(pending), timeout=0.3)
                board = cl.progress()
                for h in board:
                    if h not in runs and h in submitted:
                        runs[h] = _start_run(ctx, jobs[h])
                for ref in done:
                    h = pending.pop(ref)
                    _finish(ctx, cl, jobs[h], ref, runs, summary)
                view.update(board, summary)
    except BaseException:  # interrupted or a store/MLflow failure: leave nothing marked running
        cl.cancel(list(pending))
        for h in pending.values():
            _record_failure(ctx, h, runs, summary, "interrupted before it finished")
        ctx.tracker.end(ctx.parent_run, ok=False)
        raise


def _input_ref(cl, dep_hash: str, submitted: dict, reused_refs: dict, reusable: dict):
    if dep_hash in submitted:
        return submitted[dep_hash]
    if dep_hash not in reused_refs:
        stored = reusable[dep_hash]
        value = dict(stored)
        if "checkpoint_dir" in stored:
            value["files"] = load_checkpoint(Path(stored["checkpoint_dir"]))
        reused_refs[dep_hash] = cl.put(value)
    return reused_refs[dep_hash]


def _record_failure(ctx: Context, h: str, runs: dict, summary: RunSummary, reason: str) -> None:
    if h in runs:
        ctx.tracker.end(runs[h], ok=False)
    ctx.store.mark_failed(h, error=reason)
    summary.failed[h] = reason


def _start_run(ctx: Context, job: Job) -> str:
    run_id = ctx.tracker.start_job(
        ctx.mlflow_experiment, ctx.parent_run, job_hash=job.hash, kind=job.kind, name=job.name,
        params=job.config, tags={"specfleet.target": job.target or "", "specfleet.drafter": job.drafter or ""},
    )
    ctx.store.mark_running(job.hash, mlflow_run_id=run_id)
    return run_id


def _finish(ctx: Context, cl, job: Job, ref, runs: dict, summary: RunSummary) -> None:
    try:
        result = cl.get(ref)
    except Exception as exc:  # a worker's exception arrives wrapped by Ray; record it, keep going
        started = job.hash in runs
        reason = _one_line(exc) if started else f"not run: an upstream job failed ({_one_line(exc)})"
        _record_failure(ctx, job.hash, runs, summary, reason)
        return
    if job.hash not in runs:  # finished between two polls of the progress board
        runs[job.hash] = _start_run(ctx, job)
    run_id = runs[job.hash]
    try:
        stored = stored_result(job, result, ctx.checkpoints)
        log_job(ctx.tracker, run_id, job, stored)
        curves, diagnostics, tuned, speedups = db_extras(job, stored, experiment_id=ctx.experiment_id,
                                               spec_hash=ctx.plan.spec_hash, code_version=ctx.plan.code_version,
                                               run_id=run_id, jobs=ctx.plan.by_hash())
        ctx.store.mark_done(job.hash, result=stored, curves=curves, diagnostics=diagnostics, tuned=tuned,
                            speedup_checks=speedups)
    except Exception as exc:  # the job ran but could not be recorded: it stays not done, so it reruns
        _record_failure(ctx, job.hash, runs, summary, f"recording failed: {_one_line(exc)}")
        return
    ctx.tracker.end(run_id, ok=True)
    summary.done.append(job.hash)


def _one_line(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None) or exc
    text = str(cause).strip().splitlines()
    last = next((line for line in reversed(text) if line.strip()), type(cause).__name__)
    return f"{type(cause).__name__}: {last.strip()}"[:500]

