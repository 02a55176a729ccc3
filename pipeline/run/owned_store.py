"""The database as one driver writes it during a run (see OwnedStore)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from db.rows import JobRows
    from db.store import Store


class OwnedStore:
    """The store as one driver writes it: job updates only while that driver holds the job, so a
    driver whose lease another one took over cannot overwrite what that one records. It offers
    exactly what a run uses of the store, each call with the driver's owner id filled in."""

    def __init__(self, store: Store, owner: str):
        self.store, self.owner = store, owner

    def ensure_experiment(self, *, name: str, spec_hash: str, spec_yaml: str, code_version: str) -> int:
        return self.store.ensure_experiment(
            name=name, spec_hash=spec_hash, spec_yaml=spec_yaml, code_version=code_version
        )

    def set_experiment_run(self, experiment_id: int, mlflow_run_id: str) -> None:
        self.store.set_experiment_run(experiment_id, mlflow_run_id)

    def link_jobs(self, experiment_id: int, jobs: list[dict]) -> None:
        self.store.link_jobs(experiment_id, jobs)

    def finished_result(self, job_hash: str) -> dict | None:
        return self.store.finished_result(job_hash)

    def claim(self, job_hashes: Sequence[str], *, lease_s: float, rerun: Sequence[str] = ()) -> dict[str, str]:
        """The jobs another live driver holds (job hash -> owner); none of `job_hashes` is claimed then."""
        return self.store.claim(job_hashes, owner=self.owner, lease_s=lease_s, rerun=rerun)

    def renew(self, *, lease_s: float) -> int:
        return self.store.renew(self.owner, lease_s=lease_s)

    def mark_running(self, job_hash: str, *, mlflow_run_id: str | None) -> None:
        self.store.mark_running(job_hash, mlflow_run_id=mlflow_run_id, owner=self.owner)

    def mark_done(self, job_hash: str, *, result: dict, rows: JobRows | None = None) -> None:
        self.store.mark_done(job_hash, result=result, rows=rows, owner=self.owner)

    def mark_failed(self, job_hash: str, *, error: str) -> None:
        self.store.mark_failed(job_hash, error=error, owner=self.owner)
