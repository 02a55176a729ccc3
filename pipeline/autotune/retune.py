"""A production re-tune: `specfleet autotune --from-metrics` reads a server's spec-decode counters,
re-chooses the depth from the acceptance they show (with the offline costs, or `--cost-ratio`),
and hands the store a production version to keep once per distinct input
(pipeline/autotune/retune_inputs.py). How the settings are then printed: pipeline/autotune/tuning.py.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from pipeline.errors import UserError

if TYPE_CHECKING:
    from db.store import ProductionConfig, StoredVersion


def read_counters(sources: list[str], model_name: str | None):
    """The spec-decode counters of one scrape (totals since start) or two (a window), every label
    checked: read before the store is opened, so a refused page writes nothing."""
    from pipeline.autotune.prod_metrics import parse_counters, read_source, window

    if not 1 <= len(sources) <= 2:
        raise UserError("--from-metrics: give one scrape (totals since start) or two (a window)")
    scrapes = [parse_counters(read_source(s), model_name) for s in sources]
    counters = window(*scrapes) if len(scrapes) == 2 else scrapes[0]
    if not (counters.model_name or model_name):
        raise UserError("--model: the metrics carry no model_name label; name the target")
    return counters


@dataclasses.dataclass(frozen=True)
class Retune:
    """A production re-tune decided and not yet stored: the config the store is given, with the
    digest of the inputs it was decided from (pipeline/autotune/retune_inputs.py), and how
    production acceptance compares with the offline curve."""

    config: ProductionConfig
    report: str


def decide_from_metrics(
    store,
    counters,
    *,
    model_name: str | None,
    drafter: str,
    cost_ratio: float | None,
    hardware: str | None,
    temperature: float,
    code_version: str,
) -> Retune:
    """Production acceptance (`counters`, from read_counters) -> the 'production' tuned config it
    implies. Reads `store` (None where there is no database yet: then no cost table, offline
    choice or curve is stored) and writes nothing."""
    from pipeline.autotune.prod_metrics import production_curve
    from pipeline.autotune.retune_inputs import inputs_sha256
    from pipeline.core.choice import choose_depth

    target = counters.model_name or model_name
    curve = production_curve(counters, temperature=temperature)
    offline = [
        r
        for r in (store.best(target=target, drafter=drafter) if store is not None else [])
        if r["source"] == "offline" and hardware in (None, r["hardware"])
    ]
    pass_cost, cost_note = None, f"Leviathan's model at c = {cost_ratio}"
    given_ratio = cost_ratio is not None
    hardware = hardware or (offline[0]["hardware"] if offline else None) or "production"  # the offline choice's
    if cost_ratio is None:
        if not offline:
            raise UserError(f"--cost-ratio: no stored cost table for {target}/{drafter}; give the ratio")
        cost_ratio = offline[0]["cost_ratio"]
        curve, pass_cost, cost_note = _timed_passes(offline[0], curve, cost_ratio)
    choice = choose_depth(curve, cost_ratio, pass_cost=pass_cost)
    costed_by = None if given_ratio else offline[0]  # the offline choice whose costs this one reuses
    batch_cost = _batch_costs(store, costed_by) if costed_by else None
    if costed_by is None:
        schedule, schedule_note = None, "one depth for every batch size (a given cost ratio has no batch-size costs)"
    else:
        schedule, schedule_note = _batch_schedule(costed_by, batch_cost, curve, choice.depth)
    measured_to = costed_by.get("schedule_measured_to") if schedule else None
    config: ProductionConfig = {
        "target": target,
        "drafter": drafter,
        "hardware": hardware,
        "condition": curve.condition,
        "temperature": temperature,
        "depth": choice.depth,
        "accept_len": choice.accept_len,
        "speedup": choice.speedup,
        "cost_ratio": cost_ratio,
        "code_version": code_version,
        "decode_accept_len": choice.decode_accept_len,
        "cost_model": choice.cost_model,
        "pass_cost": list(pass_cost) if pass_cost is not None else None,
        "timed_by": costed_by.get("timed_by") if costed_by else None,
        # how the drafter is run is the pairing's, whatever measured this version's acceptance
        "block_drafting": offline[0].get("block_drafting") if offline else None,
        "schedule": [list(r) for r in schedule] if schedule else None,
        "schedule_measured_to": min(measured_to, schedule[-1][1]) if measured_to else None,
        "notes": f"from {int(counters.num_drafts)} verified drafts of {len(curve.survival)} positions; {cost_note}; "
        f"{schedule_note}",
        "inputs_sha256": inputs_sha256(
            counters,
            target=target,
            drafter=drafter,
            hardware=hardware,
            condition=curve.condition,
            temperature=temperature,
            given_cost_ratio=cost_ratio if given_ratio else None,
            costed_by=costed_by,
            batch_cost=batch_cost,
            code_version=code_version,
        ),
    }
    return Retune(config, f"{_drift_report(store, target, drafter, curve)}; {schedule_note}")


def from_metrics(
    store,
    counters,
    *,
    model_name: str | None,
    drafter: str,
    cost_ratio: float | None,
    hardware: str | None,
    temperature: float,
    code_version: str,
) -> tuple[dict, str]:
    """decide_from_metrics, stored once per distinct input: a new active 'production' version,
    or the active one when it was decided from the same inputs. Returns (retune_row, drift report)."""
    retune = decide_from_metrics(
        store,
        counters,
        model_name=model_name,
        drafter=drafter,
        cost_ratio=cost_ratio,
        hardware=hardware,
        temperature=temperature,
        code_version=code_version,
    )
    return retune_row(retune, store.ensure_production_config(retune.config)), retune.report


def retune_row(retune: Retune, stored: StoredVersion | None) -> dict:
    """What autotune prints a re-tune's engine config from, with the version it is stored as
    (None: not stored) and whether that version was reused."""
    config = retune.config
    return {
        "target": config["target"],
        "drafter": config["drafter"],
        "depth": config["depth"],
        "schedule": config.get("schedule"),
        "version": stored.version if stored else None,
        "reused": stored.reused if stored else False,
    }


def _batch_costs(store, offline: dict):
    """The batch-size costs the offline choice was profiled with (its cost job's CostProfile), or None."""
    from pipeline.run.record import finished

    # the cost job's result (profile_cost, or engine_cost where the serving engine timed it: both Profiled)
    profiled = finished(store, "profile_cost", offline["cost_job_hash"]) if offline.get("cost_job_hash") else None
    return profiled.cost if profiled is not None else None


def _batch_schedule(offline: dict, cost, curve, depth: int) -> tuple[list | None, str]:
    """(schedule or None, what was done): the depth per batch size re-derived from production
    acceptance and the batch-size costs the offline choice was profiled with (`cost`, from
    _batch_costs), over the batch sizes the offline schedule covered. Batch size 1 keeps the
    production choice."""
    from pipeline.core.choice import depth_per_batch
    from pipeline.core.schedule import schedule_from_choices

    if cost is None or not cost.draft_ms_by_batch:
        note = "one depth for every batch size (the offline choice profiled no batch sizes)"
        if offline.get("schedule"):
            note = "one depth for every batch size: the offline schedule's batch-size costs are not in the database"
        return None, note
    depths = depth_per_batch(curve, cost, first=depth)
    top = max([max(depths)] + [hi for _, hi, _ in offline.get("schedule") or []])
    schedule = schedule_from_choices(depths, top)
    return schedule, "batch schedule re-derived from the offline batch-size costs: " + ", ".join(
        f"{lo}-{hi}: k={k}" for lo, hi, k in schedule
    )


def _timed_passes(row: dict, curve, cost_ratio: float):
    """(curve, pass_cost, note): the pass costs the offline choice used, as stored with its tuned
    config; depths beyond those timed are dropped. Leviathan's model at the stored ratio when the
    offline choice used that (or recorded no cost model)."""
    pass_cost = row.get("pass_cost")
    if row.get("cost_model") != "timed" or not pass_cost or len(pass_cost) < 2:
        return curve, None, f"Leviathan's model at the stored c = {cost_ratio:.3f}"
    depth = min(curve.max_depth, len(pass_cost) - 1)
    cut = dataclasses.replace(
        curve,
        cond_accept=curve.cond_accept[:depth],
        survival=curve.survival[:depth],
        accept_len=curve.accept_len[: depth + 1],
    )
    return cut, list(pass_cost[: depth + 1]), "the offline choice's timed engine iterations"


def _drift_report(store, target: str, drafter: str, curve) -> str:
    """How far production survival has moved from the offline curve, per depth both have."""
    rows = store.curves(target=target, drafter=drafter) if store is not None else []
    offline = (
        {r["depth"]: r["survival"] for r in rows if r["temperature"] == min(x["temperature"] for x in rows)}
        if rows
        else {}
    )
    if not offline:
        return f"no offline curve for {target}/{drafter}: nothing to compare production with"
    diffs = [(j, s - offline[j]) for j, s in enumerate(curve.survival, start=1) if j in offline]
    worst = max(diffs, key=lambda d: abs(d[1]))
    text = ", ".join(f"j={j}: {d:+.3f}" for j, d in diffs)
    return f"production survival minus offline: {text} (largest at depth {worst[0]})"
