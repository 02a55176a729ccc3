"""Recording one finished job: checkpoint to the work directory, MLflow, then the database.

MLflow is written before the database marks the job done, so a job counts as finished (and is
reused by later runs) only once everything about it has landed.
"""
from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from pipeline.plan import Job
from pipeline.report import plot_comparison, plot_curve, plot_drift, plot_speedup, plot_speedup_check
from pipeline.tracking import Tracker
from pipeline.types import DRIFT_NAMES, CostProfile, Curve, DepthChoice


def save_checkpoint(files: dict[str, bytes], folder: Path) -> Path:
    """Write a checkpoint atomically: into a sibling temp folder, then rename."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    if folder.is_dir():
        return folder
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".part-"))
    for name, blob in files.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_bytes(blob)
    tmp.rename(folder)
    return folder


def load_checkpoint(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def stored_result(job: Job, result: dict, checkpoints: Path) -> dict:
    """The JSON-able result kept in the database: checkpoint bytes replaced by their folder."""
    if "files" not in result:
        return result
    folder = save_checkpoint(result["files"], checkpoints / job.hash)  # absolute: runs start from any folder
    return {**{k: v for k, v in result.items() if k != "files"}, "checkpoint_dir": str(folder.resolve())}


def log_job(tracker: Tracker, run_id: str, job: Job, stored: dict) -> None:
    """Metrics (curves with step = depth), checkpoints and plots of one finished job."""
    metrics = stored.get("metrics", {})
    tracker.log_metrics(run_id, {k: v for k, v in metrics.items() if isinstance(v, (int, float))})
    for name, series in stored.get("history", {}).items():
        tracker.log_series(run_id, name, [tuple(p) for p in series])
    if "checkpoint_dir" in stored:
        tracker.log_artifacts(run_id, stored["checkpoint_dir"], "checkpoint")
    with tempfile.TemporaryDirectory() as tmp:
        if "curves" in stored:
            curves = [Curve.from_dict(c) for c in stored["curves"]]
            log_curve(tracker, run_id, curves[0], "")  # the primary curve under the plain names
            for curve in curves:
                log_curve(tracker, run_id, curve, curve_suffix(curve))
            tracker.log_artifact(run_id, plot_curve(curves[0], Path(tmp) / "curve.png", _pair(job)))
            if len(curves) > 1:
                labelled = {curve_suffix(c).strip("/"): c for c in curves}
                tracker.log_artifact(run_id, plot_comparison(labelled, Path(tmp) / "conditions.png", _pair(job)))
        if stored.get("diagnostics"):
            log_diagnostics(tracker, run_id, stored["diagnostics"])
            if any(r["name"] in DRIFT_NAMES for r in stored["diagnostics"]):  # EAGLE drafters only
                tracker.log_artifact(run_id, plot_drift(stored["diagnostics"], Path(tmp) / "drift.png", _pair(job)))
        if "cost" in stored:
            cost = CostProfile.from_dict(stored["cost"])
            tracker.log_metrics(run_id, {"draft_ms": cost.draft_ms, "decode_ms": cost.decode_ms,
                                         "verify_ms": cost.verify_ms, "cost_ratio": cost.cost_ratio})
            if cost.pass_ms:  # the timed engine iteration the default depth choice uses, step = depth
                tracker.log_series(run_id, "pass_ms", list(enumerate(cost.pass_ms)))
        if "choice" in stored:
            choice = DepthChoice.from_dict(stored["choice"])
            tracker.log_series(run_id, "speedup", list(enumerate(choice.speedups)))
            tracker.log_metrics(run_id, {"depth": choice.depth, "accept_len": choice.accept_len,
                                         "best_speedup": choice.speedup, "cost_ratio": choice.cost_ratio})
            if choice.accept_len_ci is not None:
                tracker.log_metrics(run_id, {"accept_len_lo": choice.accept_len_ci[0],
                                             "accept_len_hi": choice.accept_len_ci[1],
                                             "best_point_depth": choice.best_point})
            tracker.log_artifact(run_id, plot_speedup(choice, Path(tmp) / "speedup.png", _pair(job)))
        if "speedup_check" in stored:
            log_speedup_check(tracker, run_id, stored["speedup_check"], Path(tmp) / "speedup_check.png", _pair(job))
        if "schedule" in stored:  # the per-batch-size depths: [[lo, hi, k], ...], inclusive ranges
            path = Path(tmp) / "schedule.json"
            path.write_text(json.dumps({"schedule": stored["schedule"], "batch_depths": stored["batch_depths"]}))
            tracker.log_artifact(run_id, path)


def metric_key(name: str, condition: str, temperature: float) -> str:
    """'survival/template_bos/T0': MLflow keys allow letters, digits, _ - . space : / only."""
    return f"{name}/{re.sub(r'[^A-Za-z0-9_.-]', '_', condition)}/T{temperature:g}"


def curve_suffix(curve: Curve) -> str:
    """What tells a curve's metrics apart from other conditions' in MLflow ('/template_bos/T0')."""
    return metric_key("", curve.condition, curve.temperature)


def log_curve(tracker: Tracker, run_id: str, curve: Curve, suffix: str) -> None:
    depths = range(1, curve.max_depth + 1)
    tracker.log_series(run_id, f"cond_accept{suffix}", list(zip(depths, curve.cond_accept)))
    tracker.log_series(run_id, f"survival{suffix}", list(zip(depths, curve.survival)))
    tracker.log_series(run_id, f"accept_len{suffix}", list(enumerate(curve.accept_len)))


def log_diagnostics(tracker: Tracker, run_id: str, rows: list[dict]) -> None:
    """Per-depth drift diagnostics with step = depth; per-curve stream RMS at step 0."""
    series: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        key = metric_key(r["name"], r["condition"], r["temperature"])
        series.setdefault(key, []).append((r["depth"], r["value"]))
    for key, points in series.items():
        tracker.log_series(run_id, key, points)


def log_speedup_check(tracker: Tracker, run_id: str, check: dict, plot: Path, title: str) -> None:
    """Measured vs predicted speedup with step = depth, the verdict, and their plot."""
    for name in ("tokens_per_s", "measured_speedup", "predicted_speedup", "engine_accept_len"):
        tracker.log_series(run_id, name, list(enumerate(check[name])))
    tracker.log_metrics(run_id, {"chosen_depth": check["chosen_depth"],
                                 "best_measured_depth": check["best_measured_depth"],
                                 "chosen_vs_best": check["chosen_vs_best"], "passed": float(check["passed"]),
                                 "greedy_mismatches": check["greedy_mismatches"]})
    tracker.log_artifact(run_id, plot_speedup_check(check, plot, title))


def speedup_rows(job: Job, check: dict) -> list[dict]:
    """One database row per depth k = 0..max_depth of an engine benchmark."""
    return [
        {"target": job.target, "drafter": job.drafter, "hardware": check["hardware"],
         "condition": check["condition"], "temperature": check["temperature"], "depth": k,
         "tokens_per_s": check["tokens_per_s"][k], "measured_speedup": check["measured_speedup"][k],
         "predicted_speedup": check["predicted_speedup"][k], "engine_accept_len": check["engine_accept_len"][k]}
        for k in range(len(check["tokens_per_s"]))
    ]


def provenance(job: Job, jobs: dict[str, Job]) -> dict:
    """The curve, cost-table and drafter jobs a select job's decision came from."""
    deps = dict(job.deps)
    curve_job = jobs.get(deps.get("curve"))
    drafter = dict(curve_job.deps).get("drafter") if curve_job is not None else None
    return {"curve_job_hash": deps.get("curve"), "cost_job_hash": deps.get("cost"), "drafter_job_hash": drafter}


def db_extras(job: Job, stored: dict, *, experiment_id: int, spec_hash: str, code_version: str, run_id: str,
              jobs: dict[str, Job]):
    """The curve, diagnostics, tuned-config and speedup-check rows that go with a job's result, if any."""
    curves = diagnostics = tuned = speedups = None
    if "speedup_check" in stored:
        speedups = speedup_rows(job, stored["speedup_check"])
    if "curves" in stored:
        curves = [(job.target, job.drafter, Curve.from_dict(c)) for c in stored["curves"]]
        diagnostics = [{"target": job.target, "drafter": job.drafter, **row} for row in stored.get("diagnostics", [])]
    if "choice" in stored:
        choice = DepthChoice.from_dict(stored["choice"])
        tuned = {
            "experiment_id": experiment_id, "target": job.target, "drafter": job.drafter,
            "hardware": stored["hardware"], "condition": stored["condition"],
            "temperature": stored["temperature"], "depth": choice.depth, "accept_len": choice.accept_len,
            "speedup": choice.speedup, "cost_ratio": choice.cost_ratio, "spec_hash": spec_hash,
            "code_version": code_version, "mlflow_run_id": run_id, "schedule": stored.get("schedule"),
            **provenance(job, jobs),
        }
    return curves, diagnostics, tuned, speedups


def _pair(job: Job) -> str:
    return f"{job.target} / {job.drafter}"
