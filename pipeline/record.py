"""Recording one finished job on the driver: MLflow, then the database.

Each kind's recorder is named in its registry entry and gets the kind's typed result. MLflow
is written before the database marks the job done, so a job counts as finished (and is reused
by later runs) only once everything about it has landed. The database rows of a result are
built in one place, `db/rows.py`, from the typed result itself. A result with files comes with
them already in the work directory (pipeline/unrecorded.py keeps every result before it is recorded).
"""
from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from db.rows import (category_depth_rows, curve_rows, diagnostic_rows, rank_accept_rows, speedup_rows,
                     tree_check_rows, tuned_config)
from pipeline.core.categories import category_curves
from pipeline.core.contracts import Dataset, Measured, Profiled, Selected, Stored, Trained, Validated
from pipeline.core.artifacts import present
from pipeline.core.kinds import kind as job_kind
from pipeline.core.trees import rank_accepts
from pipeline.core.types import DRIFT_NAMES, Curve
from pipeline.plan import Job
from pipeline.report import (plot_comparison, plot_curve, plot_drift, plot_speedup, plot_speedup_check,
                             plot_tree_check, plot_trees)
from pipeline.tracking import Tracker


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
    rec.tracker.log_metrics(rec.run_id, result.metrics)
    for name, series in result.history.items():
        rec.tracker.log_series(rec.run_id, name, series)
    rec.tracker.set_tags(rec.run_id, checkpoint_tags(result))
    rec.store.mark_done(job.hash, result=_stored_json(result))


def record_dataset(job: Job, result: Dataset, rec: Recording) -> None:
    """Training data (up to hundreds of megabytes of hidden states) stays where the job stored it:
    MLflow gets its metrics and where it is."""
    rec.tracker.log_metrics(rec.run_id, result.metrics)
    rec.tracker.set_tags(rec.run_id, checkpoint_tags(result))
    rec.store.mark_done(job.hash, result=_stored_json(result))


def checkpoint_tags(result: Stored) -> dict[str, str]:
    """What a job run says about its files: their store URI, content hash and size."""
    return {"specfleet.files_uri": result.files_uri or "", "specfleet.files_sha256": result.files_sha256 or "",
            "specfleet.files_bytes": str(sum(result.file_sizes.values()))}


def record_measured(job: Job, result: Measured, rec: Recording) -> None:
    """Curves with step = depth (the primary one also under the plain names), diagnostics, plots."""
    tracker, run_id, pair = rec.tracker, rec.run_id, _pair(job)
    curves, by_category = result.curves, category_curves(result)
    log_curve(tracker, run_id, curves[0], "")
    for curve in (*curves, *by_category):
        log_curve(tracker, run_id, curve, curve_suffix(curve))
    series: dict[str, list[tuple[int, float]]] = {}
    for d in result.diagnostics:
        series.setdefault(metric_key(d.name, d.condition, d.temperature), []).append((d.depth, d.value))
    for key, points in series.items():
        tracker.log_series(run_id, key, points)
    with tempfile.TemporaryDirectory() as tmp:
        tracker.log_artifact(run_id, plot_curve(curves[0], Path(tmp) / "curve.png", pair,
                                                 result.per_prompt[0] if result.per_prompt else ()))
        if len(curves) > 1:
            labelled = {curve_suffix(c).strip("/"): c for c in curves}
            tracker.log_artifact(run_id, plot_comparison(labelled, Path(tmp) / "conditions.png", pair))
        if any(d.name in DRIFT_NAMES for d in result.diagnostics):
            tracker.log_artifact(run_id, plot_drift(result.diagnostics, Path(tmp) / "drift.png", pair))
        primary = [c for c in by_category if (c.condition, c.temperature) == (curves[0].condition,
                                                                               curves[0].temperature)]
        if primary:
            labelled = {"all prompts": curves[0], **{c.category: c for c in primary}}
            tracker.log_artifact(run_id, plot_comparison(labelled, Path(tmp) / "categories.png", pair))
    accepts = [rank_accepts([p for prompt in paths for p in prompt], curve.max_depth, result.rank_topk) if paths else []
               for curve, paths in zip(curves, result.rank_paths)]
    by_rank: dict[int, list[tuple[int, float]]] = {}
    for d, r, share in accepts[0] if accepts else ():  # the primary curve's, one series per rank
        by_rank.setdefault(r, []).append((d, share))
    for r, points in by_rank.items():
        tracker.log_series(run_id, f"rank_accept/r{r}", points)
    rec.store.mark_done(job.hash, result=_stored_json(result),
                        curves=curve_rows(job.target, job.drafter, (*curves, *by_category)),
                        diagnostics=diagnostic_rows(job.target, job.drafter, result.diagnostics),
                        rank_accepts=rank_accept_rows(job.target, job.drafter, curves, accepts))


def record_profiled(job: Job, result: Profiled, rec: Recording) -> None:
    cost = result.cost
    rec.tracker.log_metrics(rec.run_id, {"draft_ms": cost.draft_ms, "decode_ms": cost.decode_ms,
                                         "verify_ms": cost.verify_ms, "cost_ratio": cost.cost_ratio})
    if cost.pass_ms:  # the timed engine iteration the default depth choice uses, step = depth
        rec.tracker.log_series(rec.run_id, "pass_ms", list(enumerate(cost.pass_ms)))
    rec.store.mark_done(job.hash, result=_stored_json(result))


def record_selected(job: Job, result: Selected, rec: Recording) -> None:
    tracker, run_id, choice = rec.tracker, rec.run_id, result.choice
    tracker.log_series(run_id, "speedup", list(enumerate(choice.speedups)))
    tracker.log_metrics(run_id, {"depth": choice.depth, "accept_len": choice.accept_len,
                                 "best_speedup": choice.speedup, "cost_ratio": choice.cost_ratio})
    if choice.decode_accept_len is not None:
        tracker.log_metrics(run_id, {"decode_accept_len": choice.decode_accept_len})
    if choice.accept_len_ci is not None:
        tracker.log_metrics(run_id, {"accept_len_lo": choice.accept_len_ci[0], "accept_len_hi": choice.accept_len_ci[1],
                                     "best_point_depth": choice.best_point})
    for c in result.by_category:  # the depth each prompt category would get on its own
        tracker.log_metrics(run_id, {f"depth/{_key_part(c.category)}": c.choice.depth,
                                     f"best_speedup/{_key_part(c.category)}": c.choice.speedup})
    with tempfile.TemporaryDirectory() as tmp:
        tracker.log_artifact(run_id, plot_speedup(choice, Path(tmp) / "speedup.png", _pair(job)))
        if result.tree is not None:
            tree = result.tree
            tracker.log_metrics(run_id, {"tree_tokens": len(tree.tree), "tree_decode_accept_len": tree.decode_accept_len,
                                         "tree_speedup": tree.speedup, "tree_over_chain": tree.over_chain})
            path = Path(tmp) / "tree.json"
            path.write_text(json.dumps({"tree": tree.tree, "batch_budgets": tree.batch_budgets,
                                        "trees": [c.tree for c in tree.candidates]}))
            tracker.log_artifact(run_id, path)
            tracker.log_artifact(run_id, plot_trees(tree, Path(tmp) / "trees.png", _pair(job)))
        if result.schedule is not None:  # the per-batch-size depths: [[lo, hi, k], ...], inclusive ranges
            path = Path(tmp) / "schedule.json"
            path.write_text(json.dumps({"schedule": result.schedule, "batch_depths": result.batch_depths}))
            tracker.log_artifact(run_id, path)
    tuned = tuned_config(job.target, job.drafter, result, experiment_id=rec.experiment_id, spec_hash=rec.spec_hash,
                         code_version=rec.code_version, mlflow_run_id=run_id, **provenance(job, rec.jobs))
    rec.store.mark_done(job.hash, result=_stored_json(result), tuned=tuned,
                        category_depths=category_depth_rows(job.target, job.drafter, result))


def record_validated(job: Job, result: Validated, rec: Recording) -> None:
    """Measured vs predicted speedup with step = depth, the verdict, and their plot."""
    check, tracker, run_id = result.speedup_check, rec.tracker, rec.run_id
    for name in ("tokens_per_s", "measured_speedup", "predicted_speedup", "engine_accept_len"):
        tracker.log_series(run_id, name, list(enumerate(getattr(check, name))))
    tracker.log_metrics(run_id, {"chosen_depth": check.chosen_depth, "best_measured_depth": check.best_measured_depth,
                                 "chosen_vs_best": check.chosen_vs_best, "passed": float(check.passed),
                                 "greedy_mismatches": check.greedy_mismatches})
    if check.tree is not None:
        tracker.log_metrics(run_id, {"tree_tokens_per_s": check.tree.tokens_per_s[0],
                                     "chain_tokens_per_s": check.tree.chain_tokens_per_s,
                                     "tree_over_chain_measured": check.tree.over_chain,
                                     "tree_greedy_mismatches": check.tree.greedy_mismatches})
    with tempfile.TemporaryDirectory() as tmp:
        tracker.log_artifact(run_id, plot_speedup_check(check, Path(tmp) / "speedup_check.png", _pair(job)))
        if check.tree is not None:
            tracker.log_artifact(run_id, plot_tree_check(check.tree, Path(tmp) / "tree_check.png", _pair(job)))
    rec.store.mark_done(job.hash, result=_stored_json(result),
                        speedup_checks=speedup_rows(job.target, job.drafter, check),
                        tree_checks=tree_check_rows(job.target, job.drafter, check))


def _key_part(text: str) -> str:
    """MLflow keys allow letters, digits, _ - . space : / only."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def metric_key(name: str, condition: str, temperature: float) -> str:
    """'survival/template_bos/T0'."""
    return f"{name}/{_key_part(condition)}/T{temperature:g}"


def curve_suffix(curve: Curve) -> str:
    """What tells a curve's metrics apart from other conditions' and categories' in MLflow
    ('/template_bos/T0', or '/default/T0/math' for one prompt category)."""
    suffix = metric_key("", curve.condition, curve.temperature)
    return f"{suffix}/{_key_part(curve.category)}" if curve.category else suffix


def log_curve(tracker: Tracker, run_id: str, curve: Curve, suffix: str) -> None:
    depths = range(1, curve.max_depth + 1)
    tracker.log_series(run_id, f"cond_accept{suffix}", list(zip(depths, curve.cond_accept)))
    tracker.log_series(run_id, f"survival{suffix}", list(zip(depths, curve.survival)))
    tracker.log_series(run_id, f"accept_len{suffix}", list(enumerate(curve.accept_len)))
    if curve.decode_accept_len:  # what the depth choice maximises
        tracker.log_series(run_id, f"decode_accept_len{suffix}", list(enumerate(curve.decode_accept_len)))


def provenance(job: Job, jobs: dict[str, Job]) -> dict:
    """The curve, cost-table and drafter jobs a select job's decision came from."""
    deps = dict(job.deps)
    curve_job = jobs.get(deps.get("curve"))
    drafter = dict(curve_job.deps).get("drafter") if curve_job is not None else None
    return {"curve_job_hash": deps.get("curve"), "cost_job_hash": deps.get("cost"), "drafter_job_hash": drafter}


def _pair(job: Job) -> str:
    return f"{job.target} / {job.drafter}"
