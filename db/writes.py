"""The rows behind ``Store.mark_done``: check what the caller passed, then write it.

Each function runs inside the caller's transaction and flushes, so a bad value or a duplicate
key fails there and the whole ``mark_done`` rolls back. Checks that the backends would answer
differently (SQLite ignores string lengths and turns NaN into NULL; PostgreSQL refuses both)
are made here, so both backends refuse the same inputs with the same message.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from numbers import Integral, Real
from typing import TYPE_CHECKING

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.orm import Session

from db.errors import StoreError
from db.queries import (
    CATEGORY_DEPTH_KEYS,
    CURVE_KEYS,
    DIAGNOSTIC_KEYS,
    RANK_ACCEPT_KEYS,
    SPEEDUP_KEYS,
    TREE_CHECK_KEYS,
    TUNED_KEYS,
    TUNED_OPTIONAL_KEYS,
    WORKLOAD_KEYS,
)
from db.rows import curve_points
from db.tables import (
    BLOCK_DRAFTING,
    COST_MODELS,
    DRAFT_SAMPLING,
    HASH_LEN,
    NAME_LEN,
    TAG_LEN,
    CategoryDepth,
    CurvePoint,
    Diagnostic,
    JobRecord,
    RankAccept,
    SpeedupPoint,
    TreeCheckPoint,
    TunedConfig,
)

if TYPE_CHECKING:  # only read through attributes, so db does not import pipeline at runtime
    from pipeline.core.types import Curve

# The longest string each text column of a curve point takes, and its number columns.
_CURVE_TEXT = {"target": NAME_LEN, "drafter": NAME_LEN, "condition": TAG_LEN}
_CURVE_NUMBERS = ("temperature", "cond_accept", "survival", "accept_len")
# The same for a per-category depth.
_CATEGORY_TEXT = {"target": NAME_LEN, "drafter": NAME_LEN, "condition": TAG_LEN, "category": NAME_LEN}
_CATEGORY_NUMBERS = ("temperature", "accept_len", "speedup")
# The same for a diagnostic.
_DIAGNOSTIC_TEXT = {"target": NAME_LEN, "drafter": NAME_LEN, "condition": TAG_LEN, "name": TAG_LEN}
_DIAGNOSTIC_NUMBERS = ("value", "temperature")
# The same for acceptance by rank.
_RANK_TEXT = {"target": NAME_LEN, "drafter": NAME_LEN, "condition": TAG_LEN}
_RANK_NUMBERS = ("temperature", "accept")
# The same for a speedup check.
_SPEEDUP_TEXT = {
    "target": NAME_LEN,
    "drafter": NAME_LEN,
    "hardware": NAME_LEN,
    "condition": TAG_LEN,
    "engine": NAME_LEN,
    "run": TAG_LEN,
}
SPEEDUP_RUNS = ("sweep", "printed")
SPEEDUP_DEFAULTS = {"engine": "specfleet", "batch_size": 1, "run": "sweep", "depth_run": None}
_SPEEDUP_NUMBERS = ("temperature", "tokens_per_s", "measured_speedup", "predicted_speedup", "engine_accept_len")
# The longest string each text column of a tuned config takes, and whether it is required.
_TUNED_TEXT = {
    "target": (NAME_LEN, True),
    "drafter": (NAME_LEN, True),
    "hardware": (NAME_LEN, True),
    "condition": (TAG_LEN, True),
    "code_version": (TAG_LEN, True),
    "spec_hash": (HASH_LEN, False),
    "mlflow_run_id": (TAG_LEN, False),
    "curve_job_hash": (HASH_LEN, False),
    "cost_job_hash": (HASH_LEN, False),
    "drafter_job_hash": (HASH_LEN, False),
    "timed_by": (TAG_LEN, False),
}
# Tuned-config values besides TUNED_KEYS: the optional keys and production notes.
_TUNED_COLUMNS = (*TUNED_OPTIONAL_KEYS, "notes")


def replace_curves(session: Session, job: JobRecord, curves: Sequence[tuple[str, str, Curve]]) -> None:
    """Replace the job's curve rows: one row per (condition, temperature, depth 1..max_depth).

    Depth 0 (accept_len 1, no drafting) is implied and not stored.
    """
    rows = []
    for index, entry in enumerate(curves):
        if not isinstance(entry, tuple) or len(entry) != 3:
            raise StoreError(
                f"curves[{index}] of job {job.job_hash}: need (target, drafter, Curve), got {type(entry).__name__}"
            )
        rows.extend(_curve_rows(job.id, *entry))
    session.execute(delete(CurvePoint).where(CurvePoint.job_id == job.id))
    session.add_all(rows)
    session.flush()  # so a repeated (condition, temperature, depth) fails here


def _curve_rows(job_id: int, target: str, drafter: str, curve: Curve) -> list[CurvePoint]:
    depths = curve.max_depth
    walked = len(curve.decode_accept_len)
    where = f"curve {target}/{drafter} ({curve.condition}, T={curve.temperature}" + (
        f", category {curve.category!r})" if getattr(curve, "category", "") else ")"
    )
    category = getattr(curve, "category", "")
    if not isinstance(category, str) or len(category) > NAME_LEN:
        raise StoreError(f"{where}: category must be a string of at most {NAME_LEN} characters, got {category!r}")
    if len(curve.cond_accept) != depths or len(curve.accept_len) != depths + 1 or walked not in (0, depths + 1):
        raise StoreError(
            f"{where}: need max_depth={depths} cond_accept and survival values and {depths + 1} accept_len "
            f"(and decode_accept_len, if any) values, got {len(curve.cond_accept)}, {depths}, "
            f"{len(curve.accept_len)}, {walked}"
        )
    return [
        CurvePoint(
            job_id=job_id,
            **_checked_row(
                entry, where, keys=CURVE_KEYS, text=_CURVE_TEXT, numbers=_CURVE_NUMBERS, optional=("decode_accept_len",)
            ),
        )
        for entry in curve_points(target, drafter, curve)
    ]


def replace_category_depths(session: Session, job: JobRecord, rows: Sequence[dict]) -> None:
    """Replace the job's per-category depths; each entry needs exactly CATEGORY_DEPTH_KEYS."""
    kept = []
    for index, entry in enumerate(rows):
        where = f"category_depths[{index}] of job {job.job_hash}"
        values = _checked_row(
            entry,
            where,
            keys=CATEGORY_DEPTH_KEYS,
            text=_CATEGORY_TEXT,
            numbers=_CATEGORY_NUMBERS,
            optional=("decode_accept_len",),
        )
        prompts = entry["prompts"]
        if not isinstance(prompts, Integral) or isinstance(prompts, bool) or prompts < 1:
            raise StoreError(f"{where}: prompts must be an integer >= 1, got {prompts!r}")
        kept.append(CategoryDepth(job_id=job.id, **values))
    session.execute(delete(CategoryDepth).where(CategoryDepth.job_id == job.id))
    session.add_all(kept)
    session.flush()  # so a repeated category fails here


def replace_diagnostics(session: Session, job: JobRecord, diagnostics: Sequence[dict]) -> None:
    """Replace the job's diagnostic rows; each entry needs exactly DIAGNOSTIC_KEYS."""
    rows = []
    for index, entry in enumerate(diagnostics):
        where = f"diagnostics[{index}] of job {job.job_hash}"
        values = _checked_row(entry, where, keys=DIAGNOSTIC_KEYS, text=_DIAGNOSTIC_TEXT, numbers=_DIAGNOSTIC_NUMBERS)
        rows.append(Diagnostic(job_id=job.id, **values))
    session.execute(delete(Diagnostic).where(Diagnostic.job_id == job.id))
    session.add_all(rows)
    session.flush()  # so a repeated (condition, temperature, depth, name) fails here


def replace_rank_accepts(session: Session, job: JobRecord, rows: Sequence[dict]) -> None:
    """Replace the job's acceptance by rank and depth; each entry needs exactly RANK_ACCEPT_KEYS."""
    kept = []
    for index, entry in enumerate(rows):
        where = f"rank_accepts[{index}] of job {job.job_hash}"
        values = _checked_row(entry, where, keys=RANK_ACCEPT_KEYS, text=_RANK_TEXT, numbers=_RANK_NUMBERS)
        rank = entry["rank"]
        if not isinstance(rank, Integral) or isinstance(rank, bool) or rank < 0 or values["depth"] < 1:
            raise StoreError(f"{where}: rank must be an integer >= 0 and depth >= 1, got {rank!r}, {values['depth']}")
        if not 0.0 <= values["accept"] <= 1.0:
            raise StoreError(f"{where}: accept must lie in 0..1, got {values['accept']}")
        kept.append(RankAccept(job_id=job.id, **values))
    session.execute(delete(RankAccept).where(RankAccept.job_id == job.id))
    session.add_all(kept)
    session.flush()  # so a repeated (condition, temperature, depth, rank) fails here


_TREE_CHECK_TEXT = {"target": NAME_LEN, "drafter": NAME_LEN, "condition": TAG_LEN, "hardware": NAME_LEN}
_TREE_CHECK_NUMBERS = (
    "temperature",
    "tokens_per_s",
    "engine_accept_len",
    "decode_accept_len",
    "predicted_speedup",
    "measured_speedup",
    "chain_tokens_per_s",
)


def replace_tree_checks(session: Session, job: JobRecord, rows: Sequence[dict]) -> None:
    """Replace the job's tree checks; each entry needs exactly TREE_CHECK_KEYS."""
    kept = []
    for index, entry in enumerate(rows):
        where = f"tree_checks[{index}] of job {job.job_hash}"
        values = _checked_row(entry, where, keys=TREE_CHECK_KEYS, text=_TREE_CHECK_TEXT, numbers=_TREE_CHECK_NUMBERS)
        try:
            tree = _checked_tree(json.loads(entry["tree_json"]), where)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"{where}: tree_json must be JSON [[ranks...], ...]: {exc}") from None
        values["tree_json"] = json.dumps(tree)
        for key in ("position", "chain_depth"):
            if not isinstance(entry[key], Integral) or isinstance(entry[key], bool) or entry[key] < 0:
                raise StoreError(f"{where}: {key} must be an integer >= 0, got {entry[key]!r}")
        if values["depth"] < 1 or values["tokens_per_s"] <= 0 or values["chain_tokens_per_s"] <= 0:
            raise StoreError(f"{where}: depth must be >= 1 and tokens_per_s > 0")
        kept.append(TreeCheckPoint(job_id=job.id, **values))
    session.execute(delete(TreeCheckPoint).where(TreeCheckPoint.job_id == job.id))
    session.add_all(kept)
    session.flush()


def replace_speedup_checks(session: Session, job: JobRecord, rows: Sequence[dict]) -> None:
    """Replace the job's speedup checks; each entry needs exactly SPEEDUP_KEYS, but engine, batch_size,
    run and depth_run, which default to specfleet's engine swept at batch size 1 (SPEEDUP_DEFAULTS).

    One entry per (condition, temperature, run, batch size, depth), depth 0 being plain decoding.
    """
    checks = []
    for index, entry in enumerate(rows):
        where = f"speedup_checks[{index}] of job {job.job_hash}"
        if isinstance(entry, dict):  # specfleet's own engine, swept at batch size 1, unless said otherwise
            entry = {**SPEEDUP_DEFAULTS, **entry}
        values = _checked_row(
            entry, where, keys=SPEEDUP_KEYS, text=_SPEEDUP_TEXT, numbers=_SPEEDUP_NUMBERS, optional=("depth_run",)
        )
        if values["tokens_per_s"] <= 0:
            raise StoreError(f"{where}: tokens_per_s must be > 0, got {entry['tokens_per_s']!r}")
        size = values["batch_size"]
        if not isinstance(size, Integral) or isinstance(size, bool) or size < 1:
            raise StoreError(f"{where}: batch_size must be an integer >= 1, got {size!r}")
        if values["run"] not in SPEEDUP_RUNS:
            raise StoreError(f"{where}: run must be one of {', '.join(SPEEDUP_RUNS)}, got {values['run']!r}")
        checks.append(SpeedupPoint(job_id=job.id, **values))
    session.execute(delete(SpeedupPoint).where(SpeedupPoint.job_id == job.id))
    session.add_all(checks)
    session.flush()  # so a repeated (condition, temperature, depth) fails here


def _checked_row(
    entry: object,
    where: str,
    *,
    keys: Sequence[str],
    text: dict[str, int],
    numbers: Sequence[str],
    optional: Sequence[str] = (),
) -> dict:
    """The column values of ``entry``, which needs exactly ``keys``; refused with StoreError
    unless each ``text`` key is a string within its length, depth an integer >= 0, each
    ``numbers`` key a finite number and each ``optional`` key one or None."""
    if not isinstance(entry, dict):
        raise StoreError(f"{where}: need a dict, got {type(entry).__name__}")
    missing = [key for key in keys if key not in entry]
    unknown = sorted(set(entry) - set(keys))
    if missing or unknown:
        raise StoreError(f"{where}: missing keys {missing}, unknown keys {unknown}")
    for key, limit in text.items():
        _check_text(entry[key], key, limit, where)
    return {
        **entry,
        "depth": _checked_depth(entry["depth"], where),
        **{key: _checked_number(entry[key], key, where) for key in numbers},
        **{key: _checked_number(entry[key], key, where) for key in optional if entry[key] is not None},
    }


def _check_text(value: object, key: str, limit: int, where: str) -> None:
    if not isinstance(value, str) or not value or len(value) > limit:
        raise StoreError(f"{where}: {key} must be a string of 1..{limit} characters, got {value!r}")


def _checked_depth(depth: object, where: str) -> int:
    if not isinstance(depth, Integral) or isinstance(depth, bool) or depth < 0:
        raise StoreError(f"{where}: depth must be an integer >= 0, got {depth!r}")
    return int(depth)


def _checked_number(number: object, key: str, where: str) -> float:
    if not isinstance(number, Real) or isinstance(number, bool) or not math.isfinite(number):
        raise StoreError(f"{where}: {key} must be a finite number, got {number!r}")
    return float(number)


def add_offline_version(session: Session, job: JobRecord, tuned: dict) -> None:
    """Add the select job's decision as a new active version, unless the job already has one.

    Versions are immutable, so a replayed mark_done of the same job leaves its version as it is.
    """
    where = f"tuned config of job {job.job_hash}"
    missing = [key for key in TUNED_KEYS if key not in tuned]
    unknown = sorted(set(tuned) - set(TUNED_KEYS) - set(TUNED_OPTIONAL_KEYS))
    if missing or unknown:
        raise StoreError(f"{where}: missing keys {missing}, unknown keys {unknown}")
    exists = select(TunedConfig.id).where(TunedConfig.job_id == job.id)
    if session.scalars(exists).first() is not None:
        return
    values = checked_tuned(tuned, where)
    add_version(session, values, job_id=job.id, source="offline")


def add_version(session: Session, values: dict, *, job_id: int | None, source: str) -> int:
    """Insert ``values`` as the next version of its workload and make it the only active one.

    Writers of one workload take turns: on PostgreSQL a transaction-level advisory lock keyed by
    the workload (held until commit, and taken even before the workload's first version exists,
    which no row lock could cover); on SQLite the write lock every transaction takes at its start
    (db/engine.py). So versions are numbered 1, 2, ... with no gap and one stays active.
    """
    workload = lock_workload(session, values)
    latest = session.scalar(select(func.max(TunedConfig.version)).where(*workload))
    version = (latest or 0) + 1
    session.execute(update(TunedConfig).where(*workload, TunedConfig.active).values(active=False))
    session.add(TunedConfig(job_id=job_id, version=version, active=True, source=source, **values))
    session.flush()  # so a bad experiment_id or a lost race fails here, inside this transaction
    return version


def lock_workload(session: Session, values: dict) -> list:
    """Wait for this workload's turn to write (see add_version; held until the transaction ends,
    and taken again by the same transaction at no cost); the conditions that select its rows."""
    if session.get_bind().dialect.name == "postgresql":
        key = _workload_lock([values[k] for k in WORKLOAD_KEYS])
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
    return [getattr(TunedConfig, key) == values[key] for key in WORKLOAD_KEYS]


def _workload_lock(values: list) -> int:
    """A signed 64-bit advisory-lock key for one workload (the same in every process)."""
    digest = hashlib.sha256(json.dumps(values).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def checked_tuned(tuned: dict, where: str) -> dict:
    """The column values of a tuned config, checked the same way for both backends."""
    values = {key: tuned.get(key) for key in (*TUNED_KEYS, *_TUNED_COLUMNS) if key in tuned}
    for key, (limit, required) in _TUNED_TEXT.items():
        if values.get(key) is not None or required:
            _check_text(values.get(key), key, limit, where)
    values["depth"] = _checked_depth(values["depth"], where)
    for key in ("temperature", "accept_len", "speedup", "cost_ratio"):
        values[key] = _checked_number(values[key], key, where)
    if values.get("decode_accept_len") is not None:
        values["decode_accept_len"] = _checked_number(values["decode_accept_len"], "decode_accept_len", where)
    if values.get("draft_sampling") not in (None, *DRAFT_SAMPLING):
        raise StoreError(
            f"{where}: draft_sampling must be one of {DRAFT_SAMPLING} or None, got {values['draft_sampling']!r}"
        )
    if values.get("block_drafting") not in (None, *BLOCK_DRAFTING):
        raise StoreError(
            f"{where}: block_drafting must be one of {BLOCK_DRAFTING} or None, got {values['block_drafting']!r}"
        )
    if values.get("cost_model") not in (None, *COST_MODELS):
        raise StoreError(f"{where}: cost_model must be one of {COST_MODELS} or None, got {values['cost_model']!r}")
    pass_cost = values.pop("pass_cost", None)
    if pass_cost is not None:
        if not isinstance(pass_cost, (list, tuple)) or len(pass_cost) <= values["depth"]:
            raise StoreError(f"{where}: pass_cost must give a cost for every k = 0..depth, got {pass_cost!r}")
        values["pass_cost_json"] = json.dumps([_checked_number(c, "pass_cost", where) for c in pass_cost])
    notes = values.get("notes")
    if notes is not None and not isinstance(notes, str):
        raise StoreError(f"{where}: notes must be a string or None, got {notes!r}")
    schedule = values.pop("schedule", None)
    if schedule is not None:
        values["schedule_json"] = json.dumps(_checked_schedule(schedule, where))
    measured_to = values.get("schedule_measured_to")
    if measured_to is not None and (
        schedule is None
        or not isinstance(measured_to, Integral)
        or isinstance(measured_to, bool)
        or not 1 <= measured_to <= schedule[-1][1]
    ):
        raise StoreError(f"{where}: schedule_measured_to must be a batch size the schedule covers, got {measured_to!r}")
    tree = values.pop("tree", None)
    if tree is not None:
        values["tree_json"] = json.dumps(_checked_tree(tree, where))
    for key in ("tree_decode_accept_len", "tree_speedup", "tree_chain_speedup"):
        if values.get(key) is not None:
            values[key] = _checked_number(values[key], key, where)
    if values.get("tree_all_batches") not in (None, True, False):
        raise StoreError(f"{where}: tree_all_batches must be true, false or None, got {values['tree_all_batches']!r}")
    return values


def _checked_tree(tree: object, where: str) -> list[list[int]]:
    """[[rank, ...], ...]: the draft nodes of a tree, each a non-empty list of ranks >= 0."""
    ok = isinstance(tree, (list, tuple)) and all(
        isinstance(node, (list, tuple))
        and node
        and all(isinstance(r, Integral) and not isinstance(r, bool) and r >= 0 for r in node)
        for node in tree
    )
    if not ok:
        raise StoreError(f"{where}: tree must be a list of nodes, each a non-empty list of ranks >= 0, got {tree!r}")
    return [list(node) for node in tree]


def _checked_schedule(schedule: object, where: str) -> list[list[int]]:
    """[[lo, hi, k], ...]: inclusive batch-size ranges from 1, contiguous, depth k >= 0."""
    if not isinstance(schedule, (list, tuple)) or not schedule:
        raise StoreError(f"{where}: schedule must be a non-empty list of [lo, hi, k], got {schedule!r}")
    out: list[list[int]] = []
    for entry in schedule:
        ints = (
            isinstance(entry, (list, tuple))
            and len(entry) == 3
            and all(isinstance(n, Integral) and not isinstance(n, bool) for n in entry)
        )
        if not ints:
            raise StoreError(f"{where}: schedule entry {entry!r} is not [lo, hi, k] integers")
        lo, hi, k = (int(n) for n in entry)
        start = out[-1][1] + 1 if out else 1
        if lo != start or hi < lo or k < 0:
            raise StoreError(
                f"{where}: schedule range {[lo, hi, k]} must start at batch size {start}, have lo <= hi and k >= 0"
            )
        out.append([lo, hi, k])
    return out
