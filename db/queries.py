"""Read-only queries behind the store's reporting methods; each returns plain dicts."""

from __future__ import annotations

import json
from datetime import datetime

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from db.tables import (
    JOB_STATUSES,
    CategoryDepth,
    CurvePoint,
    Diagnostic,
    Experiment,
    ExperimentJob,
    JobRecord,
    RankAccept,
    SpeedupPoint,
    TreeCheckPoint,
    TunedConfig,
)

# The columns of a tuned config the store is given, and those a `best` row shows.
TUNED_KEYS = (
    "experiment_id",
    "target",
    "drafter",
    "hardware",
    "condition",
    "temperature",
    "depth",
    "accept_len",
    "speedup",
    "cost_ratio",
    "spec_hash",
    "code_version",
    "mlflow_run_id",
)
# Keys a tuned config may carry besides TUNED_KEYS (each may be None).
TUNED_OPTIONAL_KEYS = (
    "schedule",
    "schedule_measured_to",
    "curve_job_hash",
    "cost_job_hash",
    "drafter_job_hash",
    "decode_accept_len",
    "cost_model",
    "pass_cost",
    "draft_sampling",
    "timed_by",
    "block_drafting",
    "tree",
    "tree_decode_accept_len",
    "tree_speedup",
    "tree_chain_speedup",
    "tree_all_batches",
)
# One active tuned-config version per workload; "condition" is the workload's traffic.
WORKLOAD_KEYS = ("target", "drafter", "hardware", "condition")
_VERSION_KEYS = (
    "version",
    "active",
    "source",
    "curve_job_hash",
    "cost_job_hash",
    "drafter_job_hash",
    "notes",
    "decode_accept_len",
    "cost_model",
    "draft_sampling",
    "timed_by",
    "block_drafting",
    "schedule_measured_to",
    "tree_decode_accept_len",
    "tree_speedup",
    "tree_chain_speedup",
    "tree_all_batches",
)
BEST_KEYS = (*TUNED_KEYS[1:], "created_at", *_VERSION_KEYS, "schedule", "pass_cost", "tree", "job_hash")


def _values_of(model: type) -> tuple[str, ...]:
    """The columns of a table of measured values, less its own id and its job's: what a row is
    given, read off the table itself so that the two cannot drift apart."""
    return tuple(c.name for c in model.__table__.columns if c.name not in ("id", "job_id"))


# The keys of each curve point, diagnostic and speedup point the store is given; a row read
# back adds "job_hash".
CURVE_KEYS = _values_of(CurvePoint)
CATEGORY_DEPTH_KEYS = _values_of(CategoryDepth)
RANK_ACCEPT_KEYS = _values_of(RankAccept)
TREE_CHECK_KEYS = _values_of(TreeCheckPoint)
DIAGNOSTIC_KEYS = _values_of(Diagnostic)
SPEEDUP_KEYS = _values_of(SpeedupPoint)


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _pairing_filter(
    statement: Select,
    model: type,
    target: str | None,
    drafter: str | None,
    condition: str | None = None,
) -> Select:
    if target is not None:
        statement = statement.where(model.target == target)
    if drafter is not None:
        statement = statement.where(model.drafter == drafter)
    if condition is not None:
        statement = statement.where(model.condition == condition)
    return statement


def best_configs(session: Session, *, target: str | None, drafter: str | None, history: bool) -> list[dict]:
    """The active version per workload, or with ``history`` every version, newest first.

    Sorted by target, drafter, hardware, condition, then version from the newest.
    """
    statement = _pairing_filter(
        select(TunedConfig, JobRecord.job_hash).outerjoin(JobRecord, JobRecord.id == TunedConfig.job_id),
        TunedConfig,
        target,
        drafter,
    ).order_by(*(getattr(TunedConfig, key) for key in WORKLOAD_KEYS), TunedConfig.version.desc())
    if not history:
        statement = statement.where(TunedConfig.active)
    return [_best_dict(row, job_hash) for row, job_hash in session.execute(statement)]


def _best_dict(row: TunedConfig, job_hash: str | None) -> dict:
    out = {key: getattr(row, key) for key in (*TUNED_KEYS[1:], *_VERSION_KEYS)}
    out["created_at"] = iso(row.created_at)
    out["schedule"] = None if row.schedule_json is None else json.loads(row.schedule_json)
    out["pass_cost"] = None if row.pass_cost_json is None else json.loads(row.pass_cost_json)
    out["tree"] = None if row.tree_json is None else json.loads(row.tree_json)
    out["job_hash"] = job_hash
    return out


def _measured_rows(
    session: Session,
    model: type,
    keys: tuple[str, ...],
    order: tuple[str, ...],
    *,
    target: str | None,
    drafter: str | None,
    condition: str | None = None,
    where: tuple = (),
) -> list[dict]:
    """Rows of a table of measured values (MeasuredAt) for a pairing, as dicts of ``keys`` plus
    the job's hash, sorted by the columns named in ``order``; ``where``: further conditions."""
    statement = (
        _pairing_filter(
            select(model, JobRecord.job_hash).join(JobRecord, JobRecord.id == model.job_id),
            model,
            target,
            drafter,
            condition,
        )
        .where(*where)
        .order_by(*(getattr(model, column) for column in order))
    )
    return [
        {**{key: getattr(row, key) for key in keys}, "job_hash": job_hash}
        for row, job_hash in session.execute(statement)
    ]


def curve_values(
    session: Session, *, target: str | None, drafter: str | None, condition: str | None, category: str | None
) -> list[dict]:
    """Sorted by target, drafter, condition, temperature, job, category, depth; ``category`` ""
    keeps the curves over every prompt, None every curve."""
    order = ("target", "drafter", "condition", "temperature", "job_id", "category", "depth")
    where = () if category is None else (CurvePoint.category == category,)
    return _measured_rows(
        session, CurvePoint, CURVE_KEYS, order, target=target, drafter=drafter, condition=condition, where=where
    )


def category_depths(session: Session, job_ids: list[int]) -> dict[int, list[dict]]:
    """The per-category depths of these select jobs, by job id, categories sorted."""
    statement = (
        select(CategoryDepth)
        .where(CategoryDepth.job_id.in_(job_ids))
        .order_by(CategoryDepth.job_id, CategoryDepth.category)
    )
    out: dict[int, list[dict]] = {}
    for row in session.scalars(statement):
        out.setdefault(row.job_id, []).append({key: getattr(row, key) for key in CATEGORY_DEPTH_KEYS})
    return out


def diagnostic_values(
    session: Session, *, target: str | None, drafter: str | None, condition: str | None
) -> list[dict]:
    """Sorted by target, drafter, condition, name, depth; then temperature and job for ties."""
    order = ("target", "drafter", "condition", "name", "depth", "temperature", "job_id")
    return _measured_rows(
        session, Diagnostic, DIAGNOSTIC_KEYS, order, target=target, drafter=drafter, condition=condition
    )


def rank_accept_values(session: Session, *, target: str | None, drafter: str | None) -> list[dict]:
    """Sorted by target, drafter, condition, temperature, job, depth, rank."""
    order = ("target", "drafter", "condition", "temperature", "job_id", "depth", "rank")
    return _measured_rows(session, RankAccept, RANK_ACCEPT_KEYS, order, target=target, drafter=drafter)


def tree_check_values(
    session: Session, *, target: str | None, drafter: str | None, chosen_only: bool = False
) -> list[dict]:
    """Sorted by target, drafter, hardware, job, position (0: the chosen tree); `tree` decoded.
    chosen_only: position 0 only."""
    order = ("target", "drafter", "hardware", "job_id", "position")
    where = (TreeCheckPoint.position == 0,) if chosen_only else ()
    rows = _measured_rows(session, TreeCheckPoint, TREE_CHECK_KEYS, order, target=target, drafter=drafter, where=where)
    return [{**r, "tree": json.loads(r["tree_json"])} for r in rows]


def speedup_checks(session: Session, *, target: str | None, drafter: str | None) -> list[dict]:
    """Sorted by target, drafter, hardware, condition, temperature, job, run, batch size, depth."""
    order = ("target", "drafter", "hardware", "condition", "temperature", "job_id", "run", "batch_size", "depth")
    return _measured_rows(session, SpeedupPoint, SPEEDUP_KEYS, order, target=target, drafter=drafter)


def experiment_summaries(session: Session) -> list[dict]:
    """Every experiment with ``job_counts``: how many of its jobs are in each status."""
    counts: dict[int, dict[str, int]] = {}
    per_status = (
        select(ExperimentJob.experiment_id, JobRecord.status, func.count())
        .join(JobRecord, JobRecord.id == ExperimentJob.job_id)
        .group_by(ExperimentJob.experiment_id, JobRecord.status)
    )
    for experiment_id, status, count in session.execute(per_status):
        counts.setdefault(experiment_id, {})[status] = count
    return [
        {
            "id": row.id,
            "name": row.name,
            "spec_hash": row.spec_hash,
            "code_version": row.code_version,
            "created_at": iso(row.created_at),
            "mlflow_run_id": row.mlflow_run_id,
            "job_counts": {s: counts.get(row.id, {}).get(s, 0) for s in JOB_STATUSES},
        }
        for row in session.scalars(select(Experiment).order_by(Experiment.id))
    ]


def job_summaries(session: Session, experiment_id: int | None) -> list[dict]:
    statement = select(JobRecord).order_by(JobRecord.id)
    if experiment_id is not None:
        statement = statement.join(ExperimentJob, ExperimentJob.job_id == JobRecord.id).where(
            ExperimentJob.experiment_id == experiment_id
        )
    return [
        {
            "job_hash": job.job_hash,
            "kind": job.kind,
            "name": job.name,
            "status": job.status,
            "attempts": job.attempts,
            "duration_s": job.duration_s,
            "mlflow_run_id": job.mlflow_run_id,
            "started_at": iso(job.started_at),
            "finished_at": iso(job.finished_at),
            "error": job.error,
            "owner": job.owner,  # the driver that claimed it last (db/owners.py)
            "lease_until": iso(job.lease_until),  # until when that claim holds unless renewed (None: ended)
        }
        for job in session.scalars(statement)
    ]


def experiment_results(session: Session, experiment_id: int) -> list[dict]:
    """The finished jobs of one experiment with their configs and results (parsed JSON), by job id."""
    statement = (
        select(JobRecord)
        .join(ExperimentJob, ExperimentJob.job_id == JobRecord.id)
        .where(ExperimentJob.experiment_id == experiment_id, JobRecord.status == "done")
        .order_by(JobRecord.id)
    )
    return [
        {
            "job_hash": job.job_hash,
            "kind": job.kind,
            "name": job.name,
            "mlflow_run_id": job.mlflow_run_id,
            "duration_s": job.duration_s,
            "finished_at": iso(job.finished_at),
            "config": json.loads(job.config_json),
            "result": json.loads(job.result_json) if job.result_json is not None else None,
        }
        for job in session.scalars(statement)
    ]
