"""Database rows from typed job results: the one place a result is turned into rows to write.

Each function takes a result type of `pipeline/core` (read through its attributes only) and
returns the values `Store.mark_done` stores, named as the columns of `db/tables.py`. The rows of
one job travel to `Store.mark_done` as one typed object per result kind: `CurveRows` for a
measured curve, `ChoiceRows` for a depth choice, `CheckRows` for a speedup check. A field left
None keeps what the job stored before; a sequence (even empty) replaces it.
(The store's reads, `db/reports.py`, are named for what they return: `curves()`, `diagnostics()`.)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CurveRows:
    """A measure_curve job's rows: (target, drafter, Curve) per curve, DIAGNOSTIC_KEYS dicts,
    RANK_ACCEPT_KEYS dicts."""

    curves: Sequence[tuple] | None = None
    diagnostics: Sequence[dict] | None = None
    rank_accepts: Sequence[dict] | None = None


@dataclass(frozen=True)
class ChoiceRows:
    """A select_depth job's rows: its tuned config (a new offline version) and its per-category depths."""

    tuned: dict | None = None
    category_depths: Sequence[dict] | None = None


@dataclass(frozen=True)
class CheckRows:
    """A measure_speedup or serve_check job's rows: SPEEDUP_KEYS dicts per depth (and batch size and
    run), TREE_CHECK_KEYS dicts per tree run."""

    speedup_checks: Sequence[dict] | None = None
    tree_checks: Sequence[dict] | None = None


JobRows = CurveRows | ChoiceRows | CheckRows


def curve_rows(target: str, drafter: str, curves: Iterable) -> list[tuple]:
    """(target, drafter, Curve) per measured curve, as `Store.mark_done` takes them; it stores
    each curve as the rows `curve_points` gives."""
    return [(target, drafter, curve) for curve in curves]


def curve_points(target: str, drafter: str, curve) -> list[dict]:
    """One row per depth 1..max_depth of a Curve; depth 0 (accept_len 1, no draft) is implied."""
    return [
        {
            "target": target,
            "drafter": drafter,
            "condition": curve.condition,
            "temperature": curve.temperature,
            "depth": depth,
            "cond_accept": curve.cond_accept[depth - 1],
            "survival": curve.survival[depth - 1],
            "accept_len": curve.accept_len[depth],
            "decode_accept_len": curve.decode_accept_len[depth] if curve.decode_accept_len else None,
            "category": curve.category,
        }
        for depth in range(1, curve.max_depth + 1)
    ]


def category_depth_rows(target: str, drafter: str, selected) -> list[dict]:
    """One row per prompt category of a select job's result (its `by_category` choices)."""
    return [
        {
            "target": target,
            "drafter": drafter,
            "condition": selected.condition,
            "temperature": selected.temperature,
            "category": c.category,
            "prompts": c.prompts,
            "depth": c.choice.depth,
            "accept_len": c.choice.accept_len,
            "decode_accept_len": c.choice.decode_accept_len,
            "speedup": c.choice.speedup,
        }
        for c in selected.by_category
    ]


def rank_accept_rows(target: str, drafter: str, curves: Iterable, accepts: Iterable) -> list[dict]:
    """One row per (curve, depth, rank); accepts: per curve, (depth, rank, share) triples
    (pipeline/core/trees.rank_accepts)."""
    return [
        {
            "target": target,
            "drafter": drafter,
            "condition": curve.condition,
            "temperature": curve.temperature,
            "depth": d,
            "rank": r,
            "accept": share,
        }
        for curve, triples in zip(curves, accepts)
        for d, r, share in triples
    ]


def diagnostic_rows(target: str, drafter: str, diagnostics: Iterable) -> list[dict]:
    return [
        {
            "target": target,
            "drafter": drafter,
            "condition": d.condition,
            "temperature": d.temperature,
            "depth": d.depth,
            "name": d.name,
            "value": d.value,
        }
        for d in diagnostics
    ]


def _measured_on(target: str, drafter: str, check) -> dict:
    """What places an engine's speedup point: the pairing, the hardware, the curve it checks."""
    return {
        "target": target,
        "drafter": drafter,
        "hardware": check.hardware,
        "condition": check.condition,
        "temperature": check.temperature,
    }


def speedup_rows(target: str, drafter: str, check) -> list[dict]:
    """One row per depth k = 0..max_depth of an engine benchmark."""
    return [
        {
            **_measured_on(target, drafter, check),
            "depth": k,
            "tokens_per_s": check.tokens_per_s[k],
            "measured_speedup": check.measured_speedup[k],
            "predicted_speedup": check.predicted_speedup[k],
            "engine_accept_len": check.engine_accept_len[k],
        }
        for k in range(len(check.tokens_per_s))
    ]


def serving_rows(target: str, drafter: str, check) -> list[dict]:
    """One row per point of a serving engine's check (a ServingCheck): the sweep's, then the printed config's."""
    return [
        {
            **_measured_on(target, drafter, check),
            "depth": point.depth,
            "tokens_per_s": point.tokens_per_s,
            "measured_speedup": point.measured_speedup,
            "predicted_speedup": point.predicted_speedup,
            "engine_accept_len": point.accept_len,
            "engine": check.engine,
            "batch_size": point.batch_size,
            "run": run,
            "depth_run": point.depth_run,
        }
        for run, points in (("sweep", check.sweep), ("printed", check.chosen))
        for point in points
    ]


def tuned_config(
    target: str,
    drafter: str,
    selected,
    *,
    experiment_id: int,
    spec_hash: str,
    code_version: str,
    mlflow_run_id: str,
    curve_job_hash: str | None,
    cost_job_hash: str | None,
    drafter_job_hash: str | None,
) -> dict:
    """A select job's decision as a tuned-config version, with where it came from."""
    choice = selected.choice
    return {
        "experiment_id": experiment_id,
        "target": target,
        "drafter": drafter,
        "hardware": selected.hardware,
        "condition": selected.condition,
        "temperature": selected.temperature,
        "depth": choice.depth,
        "accept_len": choice.accept_len,
        "speedup": choice.speedup,
        "cost_ratio": choice.cost_ratio,
        "spec_hash": spec_hash,
        "code_version": code_version,
        "mlflow_run_id": mlflow_run_id,
        "schedule": [list(r) for r in selected.schedule] if selected.schedule is not None else None,
        "schedule_measured_to": selected.schedule_measured_to,
        "curve_job_hash": curve_job_hash,
        "cost_job_hash": cost_job_hash,
        "drafter_job_hash": drafter_job_hash,
        "decode_accept_len": choice.decode_accept_len,
        "cost_model": choice.cost_model,
        "pass_cost": list(selected.pass_cost) if selected.pass_cost is not None else None,
        "draft_sampling": selected.draft_sampling,
        "timed_by": selected.timed_by,
        "block_drafting": selected.block_drafting,
        **(
            {}
            if selected.tree is None
            else {
                "tree": [list(n) for n in selected.tree.tree],
                "tree_decode_accept_len": selected.tree.decode_accept_len,
                "tree_speedup": selected.tree.speedup,
                "tree_chain_speedup": selected.tree.chain_speedup,
                "tree_all_batches": selected.tree.all_batches,
            }
        ),
    }


def tree_check_rows(target: str, drafter: str, check) -> list[dict]:
    """One row per tree of a speedup check's tree check (check.tree); none without one."""
    trees = check.tree
    if trees is None:
        return []
    return [
        {
            "target": target,
            "drafter": drafter,
            "condition": check.condition,
            "temperature": check.temperature,
            "hardware": check.hardware,
            "depth": max(len(n) for n in tree),
            "position": i,
            "tree_json": json.dumps([list(n) for n in tree]),
            "tokens_per_s": trees.tokens_per_s[i],
            "engine_accept_len": trees.engine_accept_len[i],
            "decode_accept_len": trees.decode_accept_len[i],
            "predicted_speedup": trees.predicted_speedup[i],
            "measured_speedup": trees.measured_speedup[i],
            "chain_depth": trees.chain_depth,
            "chain_tokens_per_s": trees.chain_tokens_per_s,
        }
        for i, tree in enumerate(trees.trees)
    ]
