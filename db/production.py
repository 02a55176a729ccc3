"""A production version stored once per distinct input (``Store.ensure_production_config``).

A production re-tune hands the store its config with the sha256 of what it was decided from
(``inputs_sha256``; which inputs count is the caller's to say). When the active version of the
config's workload (target, drafter, hardware, condition) is a production version with the same
digest, that version is the answer and nothing is written; otherwise the config becomes the
workload's next version, the active one. The comparison and the insert are one transaction under
the workload's lock (db/writes.py), so re-tunes from the same inputs running at once store one
version between them.
"""

from __future__ import annotations

import re
from typing import NamedTuple, TypedDict

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.errors import StoreError
from db.tables import TunedConfig
from db.writes import add_version, checked_tuned, lock_workload

_SHA256 = re.compile(r"[0-9a-f]{64}")


class _Decided(TypedDict):
    target: str
    drafter: str
    hardware: str
    condition: str
    temperature: float
    depth: int
    accept_len: float
    speedup: float
    cost_ratio: float
    code_version: str
    inputs_sha256: str  # lowercase hex


class ProductionConfig(_Decided, total=False):
    """What ``Store.add_production_config`` takes, with the digest of the inputs it was decided from."""

    schedule: list[list[int]] | None
    schedule_measured_to: int | None
    notes: str | None
    spec_hash: str | None
    mlflow_run_id: str | None
    decode_accept_len: float | None
    cost_model: str | None
    pass_cost: list[float] | None
    draft_sampling: str | None
    timed_by: str | None
    block_drafting: str | None


class StoredVersion(NamedTuple):
    version: int
    reused: bool  # True: the workload's active version came from the same inputs; nothing was written


def checked_production(config: object) -> dict:
    """The column values of a ProductionConfig, checked as every tuned config is; StoreError for
    a missing or unknown key or a bad value."""
    if not isinstance(config, dict):
        raise StoreError(f"production config: need a dict, got {type(config).__name__}")
    where = f"production config {config.get('target')}/{config.get('drafter')}"
    missing = sorted(ProductionConfig.__required_keys__ - set(config))
    unknown = sorted(set(config) - ProductionConfig.__required_keys__ - ProductionConfig.__optional_keys__)
    if missing or unknown:
        raise StoreError(f"{where}: missing keys {missing}, unknown keys {unknown}")
    digest = config["inputs_sha256"]
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        raise StoreError(f"{where}: inputs_sha256 must be 64 lowercase hex digits, got {digest!r}")
    return {**checked_tuned(config, where), "inputs_sha256": digest}


def reuse_or_add(session: Session, values: dict) -> StoredVersion:
    """Inside the caller's transaction: the workload's active version when it is a production
    version with ``values["inputs_sha256"]``, else ``values`` as its next version."""
    workload = lock_workload(session, values)
    same = session.scalar(
        select(TunedConfig.version).where(
            *workload,
            TunedConfig.active,
            TunedConfig.source == "production",
            TunedConfig.inputs_sha256 == values["inputs_sha256"],
        )
    )
    if same is not None:
        return StoredVersion(same, reused=True)
    return StoredVersion(add_version(session, values, job_id=None, source="production"), reused=False)
