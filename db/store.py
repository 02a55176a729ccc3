"""The store: the only writer of the tuned-config database.

Every public write runs in one transaction, so a failure leaves nothing half-written, and is
idempotent, so a driver that restarts can replay it. Callers get plain dicts and ints back;
ORM rows stay inside this package.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from db import production, writes
from db.errors import StoreError
from db.owners import lease_holds
from db.production import ProductionConfig, StoredVersion
from db.queries import BEST_KEYS, DIAGNOSTIC_KEYS, SPEEDUP_KEYS, TUNED_KEYS, TUNED_OPTIONAL_KEYS
from db.reports import Reports
from db.rows import CheckRows, ChoiceRows, CurveRows, JobRows
from db.tables import Base, Experiment, ExperimentJob, JobRecord, utc_now

if TYPE_CHECKING:  # only read through attributes, so db does not import pipeline at runtime
    pass

__all__ = [
    "BEST_KEYS",
    "DIAGNOSTIC_KEYS",
    "ProductionConfig",
    "SPEEDUP_KEYS",
    "Store",
    "StoreError",
    "StoredVersion",
    "TUNED_KEYS",
    "TUNED_OPTIONAL_KEYS",
]

# INSERT ... ON CONFLICT DO NOTHING, so concurrent or replayed inserts of the same key are safe.
_INSERT = {"postgresql": postgresql.insert, "sqlite": sqlite.insert}


class Store(Reports):
    """Experiments, jobs, curves, diagnostics, speedup checks and tuned configs in a database.

    The database is a SQLite file or PostgreSQL; reads for reports are in db/reports.py, the
    connection and its retries in db/connection.py.
    """

    # -- experiments ------------------------------------------------------------------------

    def ensure_experiment(self, *, name: str, spec_hash: str, spec_yaml: str, code_version: str) -> int:
        """The id of experiment (name, spec_hash), inserting it first if it is new."""

        def body(session: Session):
            key = {"name": name, "spec_hash": spec_hash}
            values = {**key, "spec_yaml": spec_yaml, "code_version": code_version}
            _insert_ignore(session, Experiment, values)
            return session.scalars(select(Experiment.id).filter_by(**key)).one()

        return self._write("ensure_experiment", body)

    def set_experiment_run(self, experiment_id: int, mlflow_run_id: str) -> None:
        def body(session: Session):
            result = session.execute(
                update(Experiment).where(Experiment.id == experiment_id).values(mlflow_run_id=mlflow_run_id)
            )
            if result.rowcount == 0:
                raise StoreError(f"set_experiment_run: no experiment with id {experiment_id}")

        return self._write("set_experiment_run", body)

    # -- jobs -------------------------------------------------------------------------------

    def link_job(self, experiment_id: int, *, job_hash: str, kind: str, name: str, config: dict) -> None:
        """Record job ``job_hash`` as pending if it is new, and link it to the experiment.

        A job that already exists (from this or an earlier experiment) is left as it is.
        """
        self.link_jobs(experiment_id, [{"job_hash": job_hash, "kind": kind, "name": name, "config": config}])

    def link_jobs(self, experiment_id: int, jobs: list[dict]) -> None:
        """link_job for every job of a plan ({job_hash, kind, name, config} each), in one transaction."""
        # in one order, so two drivers linking overlapping plans lock rows alike (no deadlock)
        rows = sorted(
            (
                {
                    "job_hash": j["job_hash"],
                    "kind": j["kind"],
                    "name": j["name"],
                    "status": "pending",
                    "attempts": 0,
                    "config_json": _to_json(j["config"], what=f"config of job {j['job_hash']}"),
                }
                for j in jobs
            ),
            key=lambda r: r["job_hash"],
        )

        def body(session: Session):
            insert = _INSERT[session.get_bind().dialect.name]
            for i in range(0, len(rows), 100):  # 700 bound parameters: within SQLite's oldest limit (999)
                chunk = rows[i : i + 100]
                session.execute(insert(JobRecord.__table__).values(chunk).on_conflict_do_nothing())
                ids = session.scalars(
                    select(JobRecord.id).where(JobRecord.job_hash.in_([r["job_hash"] for r in chunk]))
                ).all()
                session.execute(
                    insert(ExperimentJob.__table__)
                    .values([{"experiment_id": experiment_id, "job_id": job_id} for job_id in ids])
                    .on_conflict_do_nothing()
                )

        if rows:
            self._write("link_jobs", body)

    def job_config(self, job_hash: str) -> dict | None:
        """The config job ``job_hash`` was run with, or None for a job this database does not hold."""

        def body(session: Session):
            job = _find_job(session, job_hash)
            return None if job is None else json.loads(job.config_json)

        return self._read(body)

    def finished_result(self, job_hash: str) -> dict | None:
        """The stored result of job ``job_hash`` if it is done, else None."""

        def body(session: Session):
            job = _find_job(session, job_hash)
            if job is None or job.status != "done" or job.result_json is None:
                return None
            return json.loads(job.result_json)

        return self._read(body)

    def claim(
        self, job_hashes: Sequence[str], *, owner: str, lease_s: float, rerun: Sequence[str] = ()
    ) -> dict[str, str]:
        """Claim jobs for driver `owner`, all or none, under a lease of `lease_s` seconds.

        Returns {job hash: owner} of those a live other driver holds (then nothing is claimed: wait
        and claim again), else {}: all are claimed. A claim is taken from another owner only
        when its lease ran out or its process on this host has ended. A job already done is
        claimed only when listed in `rerun` (its checkpoint was lost), else left as it is.
        """

        def body(session: Session):
            now = utc_now()
            jobs = list(
                session.scalars(select(JobRecord).where(JobRecord.job_hash.in_(list(job_hashes))).with_for_update())
            )
            held = {
                j.job_hash: j.owner
                for j in jobs
                if j.owner not in (None, owner) and lease_holds(j.owner, j.lease_until, now)
            }
            if held:
                return held
            for job in jobs:
                if job.status == "done" and job.job_hash not in rerun:
                    continue
                if job.status == "running" and job.owner != owner:  # its driver died mid-job
                    job.status, job.error = "failed", f"its driver {job.owner} ended while it ran"
                job.owner, job.lease_until = owner, now + timedelta(seconds=lease_s)
            return {}

        return self._write("claim", body)

    def renew(self, owner: str, *, lease_s: float) -> int:
        """Extend the lease of every unfinished job `owner` holds; how many there were."""

        def body(session: Session):
            result = session.execute(
                update(JobRecord)
                .where(JobRecord.owner == owner, JobRecord.lease_until.is_not(None))
                .values(lease_until=utc_now() + timedelta(seconds=lease_s))
            )
            return result.rowcount

        return self._write("renew", body)

    def mark_running(self, job_hash: str, *, mlflow_run_id: str | None, owner: str | None = None) -> None:
        """Start a new attempt: counts it, stamps started_at, forgets the last attempt's error.
        With `owner`, only while that driver holds the job."""

        def body(session: Session):
            job = _job(session, job_hash)
            _check_owner(job, owner)
            job.status = "running"
            job.attempts = JobRecord.attempts + 1
            job.started_at = utc_now()
            job.finished_at = None
            job.duration_s = None
            job.error = None
            job.mlflow_run_id = mlflow_run_id

        return self._write("mark_running", body)

    def mark_failed(self, job_hash: str, *, error: str, owner: str | None = None) -> None:
        """Record a failed attempt. A job that is done, or (with `owner`) held by another driver
        now, is left as it is: a failure never overwrites a finished result."""

        def body(session: Session):
            job = _job(session, job_hash)
            if job.status == "done" or (owner is not None and job.owner != owner):
                return
            _finish(job, status="failed")
            job.error = error

        return self._write("mark_failed", body)

    def mark_done(self, job_hash: str, *, result: dict, rows: JobRows | None = None, owner: str | None = None) -> None:
        """Store a job's result, and its rows (db/rows.py: one typed object per result kind), in one
        transaction.

        `CurveRows.curves` holds one (target, drafter, Curve) per evaluation condition, each Curve
        naming its own condition and temperature; `diagnostics` dicts with exactly DIAGNOSTIC_KEYS
        (depth 0 for a value of the whole curve); `rank_accepts` dicts with exactly
        RANK_ACCEPT_KEYS, one per (condition, temperature, depth, rank). `CheckRows.speedup_checks`
        holds dicts with exactly SPEEDUP_KEYS, one per (condition, temperature, depth), depth 0
        being plain decoding (tokens_per_s > 0); `tree_checks` dicts with exactly TREE_CHECK_KEYS,
        one per tree a speedup check ran. `ChoiceRows.category_depths` holds dicts with exactly
        CATEGORY_DEPTH_KEYS, one per prompt category. Each of these, when given (even empty),
        replaces all the rows of that kind the job stored before; None leaves them.
        `ChoiceRows.tuned` needs TUNED_KEYS and may add TUNED_OPTIONAL_KEYS (``schedule`` as
        [[lo, hi, k], ...], and the curve, cost and drafter job hashes it came from). It becomes
        a new version (source 'offline'), the active one of its workload (target, drafter,
        hardware, condition); a job adds at most one version, so a replay leaves it as it is.
        Any bad entry raises StoreError and writes nothing. With `owner`, only while that driver
        holds the job (one whose lease another driver took over cannot overwrite its result).
        """
        if rows is not None and not isinstance(rows, CurveRows | ChoiceRows | CheckRows):
            raise StoreError(f"mark_done: rows must be CurveRows, ChoiceRows or CheckRows, got {type(rows).__name__}")

        def body(session: Session):
            job = _job(session, job_hash)
            _check_owner(job, owner)
            _finish(job, status="done")
            job.result_json = _to_json(result, what=f"result of job {job_hash}")
            job.error = None
            if isinstance(rows, CurveRows):
                if rows.curves is not None:
                    writes.replace_curves(session, job, rows.curves)
                if rows.diagnostics is not None:
                    writes.replace_diagnostics(session, job, rows.diagnostics)
                if rows.rank_accepts is not None:
                    writes.replace_rank_accepts(session, job, rows.rank_accepts)
            elif isinstance(rows, ChoiceRows):
                if rows.tuned is not None:
                    writes.add_offline_version(session, job, rows.tuned)
                if rows.category_depths is not None:
                    writes.replace_category_depths(session, job, rows.category_depths)
            elif isinstance(rows, CheckRows):
                if rows.speedup_checks is not None:
                    writes.replace_speedup_checks(session, job, rows.speedup_checks)
                if rows.tree_checks is not None:
                    writes.replace_tree_checks(session, job, rows.tree_checks)

        return self._write("mark_done", body)

    def add_production_config(
        self,
        *,
        target: str,
        drafter: str,
        hardware: str,
        condition: str,
        temperature: float,
        depth: int,
        accept_len: float,
        speedup: float,
        cost_ratio: float,
        schedule: list[list[int]] | None = None,
        notes: str | None = None,
        code_version: str,
        spec_hash: str | None = None,
        mlflow_run_id: str | None = None,
        decode_accept_len: float | None = None,
        cost_model: str | None = None,
        pass_cost: list[float] | None = None,
        draft_sampling: str | None = None,
        timed_by: str | None = None,
        schedule_measured_to: int | None = None,
        block_drafting: str | None = None,
    ) -> int:
        """Add a version measured in production (no job); it becomes the workload's active one.

        ``decode_accept_len``, ``cost_model`` and ``pass_cost`` say what the choice maximised
        and how it costed a pass, as for offline versions, and ``timed_by`` whose clock timed
        the costs (None: a given cost ratio); ``schedule_measured_to`` the largest batch size of
        the schedule whose depth was measured; ``block_drafting`` a DFlash pairing's block rule, kept
        from its offline version. Returns its version number. Bad
        values raise StoreError and write nothing.
        """
        given = dict(locals())
        given.pop("self")
        values = writes.checked_tuned(given, f"production config {target}/{drafter}")

        def body(session: Session):
            return writes.add_version(session, values, job_id=None, source="production")

        return self._write("add_production_config", body)

    def ensure_production_config(self, config: ProductionConfig) -> StoredVersion:
        """Store a production re-tune once per distinct input (db/production.py): the workload's
        active version when it is a production version decided from the same inputs
        (``config["inputs_sha256"]``), with nothing written; else ``config`` as a new version,
        the workload's active one, as add_production_config adds it. Bad values raise StoreError
        and write nothing."""
        values = production.checked_production(config)

        def body(session: Session):
            return production.reuse_or_add(session, values)

        return self._write("ensure_production_config", body)


def _insert_ignore(session: Session, model: type[Base], values: dict) -> None:
    """Insert unless a row with the same primary or unique key already exists."""
    insert = _INSERT[session.get_bind().dialect.name]
    session.execute(insert(model.__table__).values(**values).on_conflict_do_nothing())


def _find_job(session: Session, job_hash: str) -> JobRecord | None:
    return session.scalars(select(JobRecord).where(JobRecord.job_hash == job_hash)).one_or_none()


def _job(session: Session, job_hash: str) -> JobRecord:
    job = _find_job(session, job_hash)
    if job is None:
        raise StoreError(f"no job with job_hash {job_hash}: link_job it first")
    return job


def _check_owner(job: JobRecord, owner: str | None) -> None:
    if owner is not None and job.owner != owner:
        raise StoreError(f"job {job.job_hash} is held by driver {job.owner}, not {owner}: its lease ran out")


def _finish(job: JobRecord, *, status: str) -> None:
    job.lease_until = None  # the claim ends with the attempt
    job.status = status
    job.finished_at = utc_now()
    job.duration_s = _seconds_between(job.started_at, job.finished_at)


def _seconds_between(start: datetime | None, end: datetime) -> float | None:
    return None if start is None else (end - start).total_seconds()


def _to_json(value: dict, *, what: str) -> str:
    try:
        return json.dumps(value, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise StoreError(f"{what} is not plain JSON: {error}") from error
