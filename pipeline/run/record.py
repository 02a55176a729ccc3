"""Recording one finished job on the driver: MLflow, then the database.

Each kind's recorder is named in its registry entry and gets the kind's typed result. MLflow
is written before the database marks the job done, so a job counts as finished (and is reused
by later runs) only once everything about it has landed. The database rows of a result are
built in one place, `db/rows.py`, from the typed result itself. A result with files holds
their reference (pipeline/core/artifacts.py): the files stay where the job stored them.

A job's metrics go to MLflow in one batch; no recorder draws figures (half a second per job,
most of what recording cost): MLflow charts every series by its step, and `specfleet report`
draws an experiment's figures once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import ValidationError

from db.rows import (
    CheckRows,
    ChoiceRows,
    CurveRows,
    category_depth_rows,
    curve_rows,
    diagnostic_rows,
    rank_accept_rows,
    serving_rows,
    speedup_rows,
    tree_check_rows,
    tuned_config,
)
from pipeline.core.artifacts import present
from pipeline.core.categories import category_curves
from pipeline.core.contracts import Dataset, Measured, Profiled, Selected, Served, Stored, Trained, Validated
from pipeline.core.kinds import kind as job_kind
from pipeline.core.timing_noise import block_sigma
from pipeline.core.trees import rank_accepts
from pipeline.core.types import Curve
from pipeline.plan import Job
from pipeline.run.tracking import Tracker


@dataclass(frozen=True)
class Recording:
    """Where one job's result goes, and what its database rows point back to."""

    tracker: Tracker
    store: object
    run_id: str  # the job's MLflow run
    experiment_id: int
    spec_hash: str
    code_version: str
    jobs: dict[str, Job]  # the plan's jobs by hash, for provenance


def finished(store, job_kind_name: str, job_hash: str, *, files_here: bool = True):
    """The typed result of a finished job, or None: not finished, stored by an older release in
    another shape, or (with `files_here`) files its checkpoint store no longer holds. Each means:
    run it again. Without `files_here` a result is returned however its files are."""
    stored = store.finished_result(job_hash)
    if stored is None:
        return None
    try:
        result = job_kind(job_kind_name).result.model_validate(stored)
    except ValidationError:
        return None
    if files_here and isinstance(result, Stored) and not intact(result):
        return None  # the store lost or damaged it: the job has to run again
    return result


def intact(result: Stored) -> bool:
    """Whether a stored result's reference still holds what was recorded (pipeline/core/artifacts.py)."""
    return result.files_uri is not None and present(result.files_uri, result.files_sha256, result.file_sizes)


def _stored_json(result) -> dict:
    return result.model_dump(mode="json", exclude={"files"})


def record_trained(job: Job, result: Trained, rec: Recording) -> None:
    """Metrics and losses; the checkpoint stays where the job stored it, its run tagged with where."""
    rec.tracker.log_all(rec.run_id, metrics=result.metrics, series=result.history, tags=checkpoint_tags(result))
    rec.store.mark_done(job.hash, result=_stored_json(result))


def record_dataset(job: Job, result: Dataset, rec: Recording) -> None:
    """Training data (up to hundreds of megabytes of hidden states) stays where the job stored it:
    MLflow gets its metrics and where it is."""
    rec.tracker.log_all(rec.run_id, metrics=result.metrics, tags=checkpoint_tags(result))
    rec.store.mark_done(job.hash, result=_stored_json(result))


def checkpoint_tags(result: Stored) -> dict[str, str]:
    """What a job run says about its files: their store URI, content hash and size."""
    return {
        "specfleet.files_uri": result.files_uri or "",
        "specfleet.files_sha256": result.files_sha256 or "",
        "specfleet.files_bytes": str(sum(result.file_sizes.values())),
    }


def record_measured(job: Job, result: Measured, rec: Recording) -> None:
    """Curves with step = depth (the primary one also under the plain names), diagnostics, the
    primary curve's acceptance by draft rank (MLflow draws each series; `specfleet report` plots them)."""
    curves, by_category = tuple(m.curve for m in result.curves), category_curves(result)
    series = curve_series(curves[0], "")
    for curve in (*curves, *by_category):
        series.update(curve_series(curve, curve_suffix(curve)))
    for d in result.diagnostics:
        series.setdefault(metric_key(d.name, d.condition, d.temperature), []).append((d.depth, d.value))
    accepts = [
        rank_accepts([p for prompt in m.rank_paths for p in prompt], m.curve.max_depth, result.rank_topk)
        if m.rank_paths
        else []
        for m in result.curves
    ]
    for d, r, share in accepts[0] if accepts else ():  # the primary curve's, one series per rank
        series.setdefault(f"rank_accept/r{r}", []).append((d, share))
    rec.tracker.log_all(rec.run_id, series=series)
    rec.store.mark_done(
        job.hash,
        result=_stored_json(result),
        rows=CurveRows(
            curves=curve_rows(job.target, job.drafter, (*curves, *by_category)),
            diagnostics=diagnostic_rows(job.target, job.drafter, result.diagnostics),
            rank_accepts=rank_accept_rows(job.target, job.drafter, curves, accepts),
        ),
    )


def record_profiled(job: Job, result: Profiled, rec: Recording) -> None:
    cost = result.cost
    # pass_ms: the timed engine iteration the default depth choice uses, step = depth;
    # pass_cost_sigma: how far its timing moved between the profile's blocks (log terms)
    moved = {"pass_cost_sigma": block_sigma(cost.pass_ms_blocks)} if len(cost.pass_ms_blocks) >= 2 else {}
    rec.tracker.log_all(
        rec.run_id,
        metrics={
            "draft_ms": cost.draft_ms,
            "decode_ms": cost.decode_ms,
            "verify_ms": cost.verify_ms,
            "cost_ratio": cost.cost_ratio,
            **moved,
        },
        series={"pass_ms": list(enumerate(cost.pass_ms))} if cost.pass_ms else {},
    )
    rec.store.mark_done(job.hash, result=_stored_json(result))


def record_selected(job: Job, result: Selected, rec: Recording) -> None:
    """The choice and its speedup by depth; the chosen tree and the per-batch-size schedule as JSON."""
    choice = result.choice
    metrics = {
        "depth": choice.depth,
        "accept_len": choice.accept_len,
        "best_speedup": choice.speedup,
        "cost_ratio": choice.cost_ratio,
    }
    if choice.decode_accept_len is not None:
        metrics["decode_accept_len"] = choice.decode_accept_len
    if choice.accept_len_ci is not None:
        metrics.update(
            {
                "accept_len_lo": choice.accept_len_ci[0],
                "accept_len_hi": choice.accept_len_ci[1],
                "best_point_depth": choice.best_point,
            }
        )
    for c in result.by_category:  # the depth each prompt category would get on its own
        metrics.update(
            {
                f"depth/{key_part(c.category)}": c.choice.depth,
                f"best_speedup/{key_part(c.category)}": c.choice.speedup,
            }
        )
    tree = result.tree
    if tree is not None:
        metrics.update(
            {
                "tree_tokens": len(tree.tree),
                "tree_decode_accept_len": tree.decode_accept_len,
                "tree_speedup": tree.speedup,
                "tree_over_chain": tree.over_chain,
            }
        )
        rec.tracker.log_dict(
            rec.run_id,
            {"tree": tree.tree, "batch_budgets": tree.batch_budgets, "trees": [c.tree for c in tree.candidates]},
            "tree.json",
        )
    if result.schedule is not None:  # the per-batch-size depths: [[lo, hi, k], ...], inclusive ranges
        rec.tracker.log_dict(
            rec.run_id, {"schedule": result.schedule, "batch_depths": result.batch_depths}, "schedule.json"
        )
    rec.tracker.log_all(rec.run_id, metrics=metrics, series={"speedup": list(enumerate(choice.speedups))})
    tuned = tuned_config(
        job.target,
        job.drafter,
        result,
        experiment_id=rec.experiment_id,
        spec_hash=rec.spec_hash,
        code_version=rec.code_version,
        mlflow_run_id=rec.run_id,
        **provenance(job, rec.jobs),
    )
    rec.store.mark_done(
        job.hash,
        result=_stored_json(result),
        rows=ChoiceRows(tuned=tuned, category_depths=category_depth_rows(job.target, job.drafter, result)),
    )


def record_validated(job: Job, result: Validated, rec: Recording) -> None:
    """Measured vs predicted speedup with step = depth, and the verdict."""
    check = result.speedup_check
    metrics = {
        "chosen_depth": check.chosen_depth,
        "best_measured_depth": check.best_measured_depth,
        "chosen_vs_best": check.chosen_vs_best,
        "passed": float(check.passed),
        "greedy_mismatches": check.greedy_mismatches,
    }
    if check.tree is not None:
        metrics.update(
            {
                "tree_tokens_per_s": check.tree.tokens_per_s[0],
                "chain_tokens_per_s": check.tree.chain_tokens_per_s,
                "tree_over_chain_measured": check.tree.over_chain,
                "tree_greedy_mismatches": check.tree.greedy_mismatches,
            }
        )
    series = {
        name: list(enumerate(getattr(check, name)))
        for name in ("tokens_per_s", "measured_speedup", "predicted_speedup", "engine_accept_len")
    }
    rec.tracker.log_all(rec.run_id, metrics=metrics, series=series)
    rec.store.mark_done(
        job.hash,
        result=_stored_json(result),
        rows=CheckRows(
            speedup_checks=speedup_rows(job.target, job.drafter, check),
            tree_checks=tree_check_rows(job.target, job.drafter, check),
        ),
    )


def record_served(job: Job, result: Served, rec: Recording) -> None:
    """A serving engine's check: the verdict and, per batch size, the printed config against the
    engine's fastest depth; the batch-size-1 sweep as series with step = depth; one row per point."""
    check = result.serving_check
    if check is None:  # the engine cannot load this drafter: said once, nothing measured
        rec.tracker.log_all(rec.run_id, metrics={"passed": 0.0}, tags={"refused": result.refused or ""})
        rec.store.mark_done(job.hash, result=_stored_json(result))
        return
    metrics = {"passed": float(check.passed)}
    for b, ratio in check.chosen_vs_best.items():
        metrics[f"chosen_vs_best_b{b}"] = ratio
        metrics[f"best_depth_b{b}"] = check.best_depth[b]
    for point in check.chosen:
        metrics[f"depth_run_b{point.batch_size}"] = point.depth_run
        metrics[f"speedup_b{point.batch_size}"] = point.measured_speedup
    ones = [p for p in check.sweep if p.batch_size == 1]
    series = {
        name: [(p.depth, getattr(p, name)) for p in ones]
        for name in ("tokens_per_s", "measured_speedup", "predicted_speedup", "accept_len", "curve_accept_len")
    }
    tags = {"engine": check.engine, "speculative_config": check.speculative_config[:5000]}
    rec.tracker.log_all(rec.run_id, metrics=metrics, series=series, tags=tags)
    rec.store.mark_done(
        job.hash,
        result=_stored_json(result),
        rows=CheckRows(speedup_checks=serving_rows(job.target, job.drafter, check)),
    )


def key_part(text: str) -> str:
    """MLflow keys allow letters, digits, _ - . space : / only."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def metric_key(name: str, condition: str, temperature: float) -> str:
    """'survival/template_bos/T0'."""
    return f"{name}/{key_part(condition)}/T{temperature:g}"


def curve_suffix(curve: Curve) -> str:
    """What tells a curve's metrics apart from other conditions' and categories' in MLflow
    ('/template_bos/T0', or '/default/T0/math' for one prompt category)."""
    suffix = metric_key("", curve.condition, curve.temperature)
    return f"{suffix}/{key_part(curve.category)}" if curve.category else suffix


def curve_series(curve: Curve, suffix: str) -> dict[str, list[tuple[int, float]]]:
    """A curve's metrics by depth: cond_accept and survival at 1..K, accept_len (and the decoder's
    decode_accept_len, what the depth choice maximises) at 0..K."""
    depths = range(1, curve.max_depth + 1)
    out = {
        f"cond_accept{suffix}": list(zip(depths, curve.cond_accept)),
        f"survival{suffix}": list(zip(depths, curve.survival)),
        f"accept_len{suffix}": list(enumerate(curve.accept_len)),
    }
    if curve.decode_accept_len:
        out[f"decode_accept_len{suffix}"] = list(enumerate(curve.decode_accept_len))
    return out


def provenance(job: Job, jobs: dict[str, Job]) -> dict:
    """The curve, cost-table and drafter jobs a select job's decision came from."""
    deps = dict(job.deps)
    curve_job = jobs.get(deps.get("curve"))
    drafter = dict(curve_job.deps).get("drafter") if curve_job is not None else None
    return {"curve_job_hash": deps.get("curve"), "cost_job_hash": deps.get("cost"), "drafter_job_hash": drafter}
