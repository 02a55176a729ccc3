"""The rows behind ``Store.mark_done``: check what the caller passed, then write it.

Each function runs inside the caller's transaction and flushes, so a bad value or a duplicate
key fails there and the whole ``mark_done`` rolls back. Checks that the backends would answer
differently (SQLite ignores string lengths and turns NaN into NULL; PostgreSQL refuses both)
are made here, so both backends refuse the same inputs with the same message.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral, Real
from typing import TYPE_CHECKING

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from db.errors import StoreError
from db.queries import DIAGNOSTIC_KEYS, TUNED_KEYS
from db.tables import NAME_LEN, TAG_LEN, CurvePoint, Diagnostic, Job, TunedConfig

if TYPE_CHECKING:  # only read through attributes, so db does not import pipeline at runtime
    from pipeline.types import Curve

# The longest string each text column of a diagnostic takes.
_DIAGNOSTIC_TEXT = {"target": NAME_LEN, "drafter": NAME_LEN, "condition": TAG_LEN, "name": TAG_LEN}


def replace_curves(
    session: Session, job: Job, curves: Sequence[tuple[str, str, Curve]]
) -> None:
    """Replace the job's curve rows: one row per (condition, temperature, depth 1..max_depth).

    Depth 0 (accept_len 1, no drafting) is implied and not stored.
    """
    rows = []
    for index, entry in enumerate(curves):
        if not isinstance(entry, tuple) or len(entry) != 3:
            raise StoreError(
                f"curves[{index}] of job {job.job_hash}: need (target, drafter, Curve), "
                f"got {type(entry).__name__}"
            )
        rows.extend(_curve_rows(job.id, *entry))
    session.execute(delete(CurvePoint).where(CurvePoint.job_id == job.id))
    session.add_all(rows)
    session.flush()  # so a repeated (condition, temperature, depth) fails here


def _curve_rows(job_id: int, target: str, drafter: str, curve: Curve) -> list[CurvePoint]:
    depths = curve.max_depth
    if len(curve.cond_accept) != depths or len(curve.accept_len) != depths + 1:
        raise StoreError(
            f"curve {target}/{drafter} ({curve.condition}, T={curve.temperature}): need "
            f"max_depth={depths} cond_accept and survival values and {depths + 1} accept_len "
            f"values, got {len(curve.cond_accept)}, {depths}, {len(curve.accept_len)}"
        )
    return [
        CurvePoint(
            job_id=job_id,
            target=target,
            drafter=drafter,
            condition=curve.condition,
            temperature=curve.temperature,
            depth=depth,
            cond_accept=curve.cond_accept[depth - 1],
            survival=curve.survival[depth - 1],
            accept_len=curve.accept_len[depth],
        )
        for depth in range(1, depths + 1)
    ]


def replace_diagnostics(session: Session, job: Job, diagnostics: Sequence[dict]) -> None:
    """Replace the job's diagnostic rows; each entry needs exactly DIAGNOSTIC_KEYS."""
    rows = []
    for index, entry in enumerate(diagnostics):
        where = f"diagnostics[{index}] of job {job.job_hash}"
        rows.append(Diagnostic(job_id=job.id, **_checked_diagnostic(entry, where)))
    session.execute(delete(Diagnostic).where(Diagnostic.job_id == job.id))
    session.add_all(rows)
    session.flush()  # so a repeated (condition, temperature, depth, name) fails here


def _checked_diagnostic(entry: object, where: str) -> dict:
    if not isinstance(entry, dict):
        raise StoreError(f"{where}: need a dict, got {type(entry).__name__}")
    missing = [key for key in DIAGNOSTIC_KEYS if key not in entry]
    unknown = sorted(set(entry) - set(DIAGNOSTIC_KEYS))
    if missing or unknown:
        raise StoreError(f"{where}: missing keys {missing}, unknown keys {unknown}")
    for key, limit in _DIAGNOSTIC_TEXT.items():
        text = entry[key]
        if not isinstance(text, str) or not text or len(text) > limit:
            raise StoreError(
                f"{where}: {key} must be a string of 1..{limit} characters, got {text!r}"
            )
    depth, value, temperature = entry["depth"], entry["value"], entry["temperature"]
    if not isinstance(depth, Integral) or isinstance(depth, bool) or depth < 0:
        raise StoreError(f"{where}: depth must be an integer >= 0, got {depth!r}")
    for key, number in (("value", value), ("temperature", temperature)):
        if not isinstance(number, Real) or isinstance(number, bool) or not math.isfinite(number):
            raise StoreError(f"{where}: {key} must be a finite number, got {number!r}")
    return {**entry, "depth": int(depth), "value": float(value), "temperature": float(temperature)}


def upsert_tuned(session: Session, job: Job, tuned: dict) -> None:
    """Update the job's one tuned config in place (keeping id and created_at), or add it."""
    missing = [key for key in TUNED_KEYS if key not in tuned]
    unknown = sorted(set(tuned) - set(TUNED_KEYS))
    if missing or unknown:
        raise StoreError(
            f"tuned config of job {job.job_hash}: missing keys {missing}, unknown keys {unknown}"
        )
    row = session.scalars(select(TunedConfig).where(TunedConfig.job_id == job.id)).one_or_none()
    if row is None:
        row = TunedConfig(job_id=job.id)
        session.add(row)
    for key in TUNED_KEYS:
        setattr(row, key, tuned[key])
    session.flush()  # so a bad experiment_id fails here, inside this transaction
