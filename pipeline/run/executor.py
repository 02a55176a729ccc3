"""Executing a plan: reuse finished jobs, run the rest on a cluster, record each as it finishes.

The cluster is a parameter: `connect()` returns a `Cluster` (pipeline/run/cluster.py).
`pipeline/run/ray_cluster.py` runs jobs as Ray tasks (the default);
`pipeline/run/local_cluster.py` runs them one after another in this process, with no Ray at
all, which is how the tests drive the failure and interrupt paths in seconds. The plan runs the
same on both. Those paths: a failed job fails its dependents and the rest goes on; a rerun
retries only what failed; an interrupt leaves no job or MLflow run marked running; a result
that breaks its kind's contract (or whose input was never recorded) is not recorded; a resource
request no node can meet is refused before anything is written.

Order of events for a spec: find what is finished (reusable) and what an earlier run finished
but could not record (kept in the work directory, pipeline/run/unrecorded.py); when something
has to run, connect and check resources (a refused spec writes nothing to the stores); open
the experiment in the database and MLflow, claim the jobs (writing through an OwnedStore,
pipeline/run/owned_store.py), record the kept results, submit every job still to run, and
record results as they arrive (each kept on disk first).
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from db.owners import new_owner
from db.secrets import mask_secrets
from pipeline.core.contracts import Stored
from pipeline.core.files import clean_partials
from pipeline.core.kinds import kind as job_kind
from pipeline.core.kinds import resolve
from pipeline.errors import UserError
from pipeline.plan import Job, Plan
from pipeline.report.plots import plot_comparison
from pipeline.run.checkpoint_store import default_store, given_store, unshared
from pipeline.run.cluster import Cluster
from pipeline.run.owned_store import OwnedStore
from pipeline.run.progress import ProgressView
from pipeline.run.record import Recording, finished, intact
from pipeline.run.tracking import Tracker
from pipeline.run.unrecorded import Unrecorded


@dataclass
class RunSummary:
    experiment_id: int
    mlflow_run_id: str
    cluster: str
    cached: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)  # finished by an earlier run, recorded by this one
    failed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    report: Path | None = None  # the plot of every pairing's curve


LEASE_S = float(os.environ.get("SPECFLEET_LEASE_S", 60))  # a driver renews its claims every third of it
WAIT_POLL_S = 2.0  # how often a driver waiting for another's jobs looks again
MAX_CURVES_PLOTTED = 24  # pairings in the run's one plot of every curve


@dataclass
class Context:
    plan: Plan
    store: OwnedStore
    tracker: Tracker
    unrecorded: Unrecorded
    owner: str = field(default_factory=new_owner)
    stale: set[str] = field(default_factory=set)  # done jobs whose checkpoint is gone or damaged (_reusable)
    experiment_id: int = 0
    mlflow_experiment: str = ""
    parent_run: str = ""
    jobs: dict[str, Job] = field(default_factory=dict)  # the plan's jobs by hash
    checkpoints: str = ""  # the store this run's jobs put their files in (pipeline/core/artifacts.py)
    runs: dict[str, str] = field(default_factory=dict)  # job hash -> its MLflow run, once started
    summary: RunSummary | None = None  # what the run did so far, from when the experiment is open

    def __post_init__(self):
        self.jobs = self.plan.by_hash()


def run_plan(
    plan: Plan,
    *,
    spec,
    spec_text: str,
    store,
    tracker: Tracker,
    workdir: Path,
    connect: Callable[[], Cluster],
    console,
    checkpoints: str | None = None,
) -> RunSummary:
    """Run `plan`; `connect` is called only when some job has to run. `checkpoints`: the store the
    jobs put their files in (default: pipeline/run/checkpoint_store.py's choice)."""
    t0 = time.perf_counter()
    given = given_store(checkpoints, tracker)  # a bad one is refused before anything is read or written
    owner = new_owner()
    ctx = Context(plan, OwnedStore(store, owner), tracker, Unrecorded(workdir), owner=owner)
    for folder in (ctx.unrecorded.checkpoints, ctx.unrecorded.root):  # what a killed run was still writing
        for left in clean_partials(folder):
            console.print(f"removed {left.name}: a half-written file of a run that ended")
    reusable = _reusable(ctx)
    for h in reusable:  # recorded already (a driver killed between recording and removing the copy)
        ctx.unrecorded.drop(h)
    kept = ctx.unrecorded.held([j for j in plan.jobs if j.hash not in reusable])
    to_run = [j for j in plan.jobs if j.hash not in reusable and j.hash not in kept]
    cl = connect() if to_run else None  # nothing to run: no cluster needed
    try:
        about = cl.check_resources(*_requests(to_run)) if cl is not None else "no cluster needed"
        elsewhere = cl.elsewhere() if cl is not None else 0
        if elsewhere and not given and not tracker.is_server():
            raise UserError(unshared(elsewhere, "this machine's work directory"))
        summary = ctx.summary = _open_experiment(ctx, spec, spec_text, about)
        try:
            ctx.checkpoints = given or default_store(tracker, ctx.parent_run, workdir, elsewhere)
            reusable = _claim(ctx, reusable, console)
            summary.cached = list(reusable)
            _record_kept(ctx, kept, reusable, console)
            if cl is not None:
                _execute(ctx, cl, reusable, console)
            summary.report = _report(ctx, workdir / "reports" / f"{spec.name}-curves.png", spec.name)
        except BaseException:
            tracker.end(ctx.parent_run, ok=False)
            raise
        tracker.end(ctx.parent_run, ok=not summary.failed)
    finally:
        if cl is not None:
            cl.close()
    summary.seconds = time.perf_counter() - t0
    return summary


def _open_experiment(ctx: Context, spec, spec_text: str, about: str) -> RunSummary:
    plan = ctx.plan
    ctx.experiment_id = ctx.store.ensure_experiment(
        name=spec.name, spec_hash=plan.spec_hash, spec_yaml=spec_text, code_version=plan.code_version
    )
    ctx.mlflow_experiment, ctx.parent_run = ctx.tracker.parent_run(
        experiment=f"specfleet/{spec.name}",
        spec_hash=plan.spec_hash,
        params=spec.model_dump(mode="json"),
        tags={"specfleet.code_version": plan.code_version},
    )
    ctx.store.set_experiment_run(ctx.experiment_id, ctx.parent_run)
    ctx.store.link_jobs(
        ctx.experiment_id,
        [
            {"job_hash": j.hash, "kind": j.kind, "name": j.name, "config": j.config.model_dump(mode="json")}
            for j in plan.jobs
        ],
    )
    return RunSummary(ctx.experiment_id, ctx.parent_run, about)


def _report(ctx: Context, path: Path, name: str) -> Path | None:
    """Plot every measured curve of the plan together; log it to the experiment's parent run. A
    fleet of more pairings than one plot can tell apart gets none (`specfleet report` draws each)."""
    measuring = [job for job in ctx.plan.jobs if job.kind == "measure_curve"]
    if not measuring or len(measuring) > MAX_CURVES_PLOTTED:
        return None
    curves = {}
    for job in measuring:
        measured = finished(ctx.store, job.kind, job.hash)
        if measured is not None:
            curves[f"{job.target} / {job.drafter}"] = measured.primary.curve
    if not curves:
        return None
    plot_comparison(curves, path, f"{name}: acceptance vs depth")
    ctx.tracker.log_artifact(ctx.parent_run, path)
    return path


def _claim(ctx: Context, reusable: dict, console) -> dict:
    """Claim every job this run has to run, all at once; while another live driver holds some,
    hold nothing and wait (so two drivers never wait on each other), then look again at those
    jobs only: what the other one finished is reused. Jobs a dead driver left are taken over, and
    the MLflow runs it left running ended as killed. Returns the reusable results as they are now."""
    while True:
        to_run = [j.hash for j in ctx.plan.jobs if j.hash not in reusable]
        # done once but their files are gone or damaged (found by _reusable): they run again
        others = ctx.store.claim(to_run, lease_s=LEASE_S, rerun=sorted(ctx.stale))
        if not others:
            # a job another driver finished after the last look is left to it by the claim: reuse it
            reusable = {**reusable, **_reusable(ctx, set(to_run))}
            claimed = {h for h in to_run if h not in reusable}
            ctx.tracker.end_abandoned(ctx.mlflow_experiment, done=set(reusable), claimed=claimed)
            return reusable
        console.print(f"waiting: driver {sorted(set(others.values()))[0]} holds {len(others)} of this run's jobs")
        time.sleep(WAIT_POLL_S)
        reusable = {**reusable, **_reusable(ctx, set(to_run))}


def _reusable(ctx: Context, hashes: set[str] | None = None) -> dict[str, object]:
    """Finished jobs (of `hashes`, else of the plan) whose typed results and checkpoints are still
    there; those finished whose checkpoint is not are left in ctx.stale, to run again."""
    out = {}
    ctx.stale = set()
    for job in ctx.plan.jobs:
        if hashes is not None and job.hash not in hashes:
            continue
        result = finished(ctx.store, job.kind, job.hash, files_here=False)
        if result is None:
            continue
        if isinstance(result, Stored) and not intact(result):
            ctx.stale.add(job.hash)
        else:
            out[job.hash] = result
    return out


def _record_kept(ctx: Context, kept: dict, reusable: dict, console) -> None:
    """Record the results an earlier run finished but could not record (pipeline/run/unrecorded.py);
    they join `reusable`, as inputs of the jobs still to run. Those another driver recorded in the
    meantime are dropped, and so are those with an input that has to run again (they run again
    on it)."""
    for job in ctx.plan.jobs:  # inputs are recorded before what ran on them
        if job.hash not in kept:
            continue
        if job.hash in reusable or any(h not in reusable for _, h in job.deps):
            ctx.unrecorded.drop(job.hash)
            continue
        ctx.store.renew(lease_s=LEASE_S)  # uploading checkpoints can take a while
        ctx.runs[job.hash] = _start_run(ctx, job)
        if _record(ctx, job, kept[job.hash]):
            ctx.summary.recovered.append(job.hash)
            console.print(f"recorded {job.name}: finished by an earlier run that could not record it")
        reusable[job.hash] = kept[job.hash]  # not run again either way; what runs on it is recorded only if it is


def _execute(ctx: Context, cl: Cluster, reusable: dict, console) -> None:
    jobs = ctx.jobs
    submitted: dict[str, object] = {}  # job hash -> result ref of a job that runs now
    reused_refs: dict[str, object] = {}  # job hash -> ref of a reused result handed to the cluster
    pending: dict = {}
    try:
        for job in ctx.plan.jobs:  # dependencies come first
            if job.hash in reusable:
                continue
            deps = {}
            for name, h in job.deps:
                if h not in submitted and h not in reused_refs:
                    reused_refs[h] = cl.put(reusable[h])  # a reference: the job fetches the files
                deps[name] = submitted.get(h, reused_refs.get(h))
            ref = cl.submit(job, deps, ctx.checkpoints)
            submitted[job.hash], pending[ref] = ref, job.hash
        view = ProgressView(console, jobs, cached={*ctx.summary.cached, *ctx.summary.recovered})
        seen: dict[str, float] = {}  # job hash -> when the board first showed it started
        renewed = time.monotonic()
        with view:
            while pending:
                if time.monotonic() - renewed > LEASE_S / 3:  # the heartbeat: our claims stay ours
                    ctx.store.renew(lease_s=LEASE_S)
                    renewed = time.monotonic()
                # results on disk before anything is written: a store outage from here on loses none
                arrived = {
                    ref: _collect(ctx, cl, jobs[pending[ref]], ref) for ref in cl.wait(list(pending), timeout=0.3)
                }
                board = cl.progress()
                for h in board:
                    if h not in ctx.runs and h in submitted:
                        ctx.runs[h] = _start_run(ctx, jobs[h])
                    seen.setdefault(h, time.monotonic())
                for ref, outcome in arrived.items():
                    h = pending.pop(ref)
                    _finish(ctx, cl, jobs[h], ref, outcome)
                for ref, h in list(pending.items()):
                    limit = jobs[h].time_limit_s
                    if limit is not None and h in seen and time.monotonic() - seen[h] > limit:
                        cl.cancel([ref])  # its downstream jobs then fail as "not run"
                        pending.pop(ref)
                        _record_failure(
                            ctx,
                            h,
                            f"timed out: ran longer than resources.{jobs[h].kind}.time_limit_s = {limit:g} s",
                        )
                view.update(board, ctx.summary)
    except BaseException:  # interrupted or a store/MLflow failure: leave nothing marked running
        _keep_arrived(ctx, cl, pending)
        cl.cancel(list(pending))
        kept = [h for h in ctx.jobs if h not in reusable and ctx.unrecorded.has(h)]
        if kept:
            console.print(
                f"{len(kept)} finished result(s) not recorded are kept in {ctx.unrecorded.root}: "
                f"the next run records them"
            )
        never_submitted = [j.hash for j in ctx.plan.jobs if j.hash not in submitted and j.hash not in reusable]
        for h in [*pending.values(), *never_submitted]:
            _record_failure(ctx, h, "interrupted before it finished")
        raise


def _record_failure(ctx: Context, h: str, reason: str, detail: str | None = None) -> None:
    """The job failed: its one-line reason is printed and stored, with the whole traceback (which
    `specfleet status --job` shows) under it in the database."""
    if h in ctx.runs:
        ctx.tracker.end(ctx.runs[h], ok=False)
    ctx.store.mark_failed(h, error=reason if not detail else f"{reason}\n{detail}")
    ctx.summary.failed[h] = reason


def _start_run(ctx: Context, job: Job) -> str:
    run_id = ctx.tracker.start_job(
        ctx.mlflow_experiment,
        ctx.parent_run,
        job_hash=job.hash,
        kind=job.kind,
        name=job.name,
        params=job.config.model_dump(mode="json"),
        tags={"specfleet.target": job.target or "", "specfleet.drafter": job.drafter or ""},
    )
    ctx.store.mark_running(job.hash, mlflow_run_id=run_id)
    return run_id


def _keep_arrived(ctx: Context, cl: Cluster, pending: dict) -> None:
    """When a run ends early: the results that finished but were not collected yet go on disk too."""
    try:
        for ref in cl.wait(list(pending), timeout=0):
            _collect(ctx, cl, ctx.jobs[pending[ref]], ref)
    except Exception:  # noqa: BLE001 - the run is already ending with its own error; this is a salvage
        pass


def _collect(ctx: Context, cl: Cluster, job: Job, ref):
    """A finished job's result, kept on disk (pipeline/run/unrecorded.py) when it is its kind's; or
    the exception it ended with."""
    try:
        result = cl.get(ref)
    except Exception as exc:  # a worker's exception (wrapped by Ray)
        return exc
    return ctx.unrecorded.keep(job, result) if isinstance(result, job_kind(job.kind).result) else result


def _finish(ctx: Context, cl: Cluster, job: Job, ref, outcome) -> None:
    """Record what `_collect` gave for a job: its failure, or its result."""
    if isinstance(outcome, Exception):  # the job failed: record it, keep going
        exc = outcome
        started = job.hash in ctx.runs
        worker_log = getattr(getattr(exc, "cause", None) or exc, "worker_log", None)
        if started and worker_log:
            ctx.tracker.log_text(ctx.runs[job.hash], mask_secrets(worker_log), "worker.log")
        upstream = next((ctx.jobs[h].name for _, h in job.deps if h in ctx.summary.failed), None)
        reason = (
            _one_line(exc)
            if started
            else f"not run: its input {upstream} failed"
            if upstream
            else f"not run: an upstream job failed ({_one_line(exc)})"
        )
        _record_failure(ctx, job.hash, reason, detail=_traceback(exc) if started else None)
        return
    result, wanted = outcome, job_kind(job.kind).result
    if job.hash not in ctx.runs:  # finished between two polls of the progress board
        ctx.runs[job.hash] = _start_run(ctx, job)
    worker_log = cl.log(ref)
    if worker_log:
        ctx.tracker.log_text(ctx.runs[job.hash], mask_secrets(worker_log), "worker.log")
    if not isinstance(result, wanted):
        _record_failure(
            ctx,
            job.hash,
            f"recording failed: TypeError: {job.kind} returned {type(result).__name__}, not {wanted.__name__}",
        )
        return
    if _record(ctx, job, result):
        ctx.summary.done.append(job.hash)


def _record(ctx: Context, job: Job, result) -> bool:
    """Record a finished job's kept result in MLflow and the database (its run is started); the
    kept copy is removed once it is. Whether it was recorded."""
    run_id = ctx.runs[job.hash]
    failed_inputs = [ctx.jobs[h].name for _, h in job.deps if h in ctx.summary.failed]
    if failed_inputs:  # it ran on an input that was never recorded: recording it would orphan it
        _record_failure(ctx, job.hash, f"not recorded: its input {failed_inputs[0]} failed to record")
        return False
    rec = Recording(
        ctx.tracker, ctx.store, run_id, ctx.experiment_id, ctx.plan.spec_hash, ctx.plan.code_version, ctx.jobs
    )
    try:
        resolve(job_kind(job.kind).record)(job, result, rec)
    except Exception as exc:  # the job ran but could not be recorded: it stays not done; its result stays kept
        _record_failure(ctx, job.hash, f"recording failed: {_one_line(exc)}")
        return False
    ctx.unrecorded.drop(job.hash)
    ctx.tracker.end(run_id, ok=True)
    return True


def _traceback(exc: BaseException, limit: int = 20_000) -> str:
    """The whole story of a worker's failure: Ray's error carries the remote traceback in its text;
    an in-process one has its own. Secrets masked, the end kept when it is long."""
    text = str(exc) if "Traceback" in str(exc) else "".join(traceback.format_exception(exc))
    return mask_secrets(text.strip())[-limit:]


def _one_line(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None) or exc
    text = str(cause).strip().splitlines()
    last = next((line for line in reversed(text) if line.strip()), type(cause).__name__)
    return mask_secrets(f"{type(cause).__name__}: {last.strip()}")[:500]  # stored, logged and printed


def _requests(jobs) -> tuple[dict, dict]:
    """What each kind asks of one node (a group's: each worker's) and the kinds run on groups of workers."""
    requests, groups = {}, {}
    for j in jobs:
        group = getattr(j.config, "group", None)
        if group is None:
            requests[j.kind] = (j.num_cpus, j.num_gpus, j.accelerator_type)
        else:
            requests[j.kind] = (group.num_cpus, group.num_gpus, group.accelerator_type)
            groups[j.kind] = max(groups.get(j.kind, 0), group.workers)
    return requests, groups
