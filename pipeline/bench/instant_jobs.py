"""Instant jobs: every kind answered at once with a well-typed result, for the fleet simulation.

A fleet's orchestration cost (planning, scheduling, MLflow, the database) is what remains when
its jobs take no time. `instant_job` stands in for the worker entry point (workers/jobs/run.py)
with its signature: training and data jobs store a small folder in the run's checkpoint store
by reference, as real ones do; curves, cost tables and speedup checks are fixed made-up values
of the right shapes; select_depth runs for real (it is arithmetic on its inputs). Nothing here
imports torch.
"""

from __future__ import annotations

import json
import shutil

from pipeline.core import contracts as c
from pipeline.core.artifacts import publish, scratch
from pipeline.core.kinds import kind as job_kind
from pipeline.core.kinds import resolve
from pipeline.core.types import CostProfile, Curve

HARDWARE = "simulated x1 float32"


def _curve(max_depth: int, condition: str, temperature: float) -> Curve:
    accept = tuple(0.8 ** (k + 1) for k in range(max_depth))
    survival = tuple(0.8 ** sum(range(1, k + 2)) for k in range(max_depth))
    lengths = tuple(1.0 + sum(survival[:k]) for k in range(max_depth + 1))
    return Curve(condition, temperature, 64, accept, survival, lengths, decode_accept_len=lengths)


def _measured(config: c.MeasureCurveConfig) -> c.Measured:
    ev = config.evaluation
    curves = tuple(_curve(ev.max_depth, cond, t) for cond in ev.conditions for t in ev.temperatures)
    rms = tuple(
        c.DiagnosticValue(
            condition=curves[0].condition, temperature=curves[0].temperature, depth=k, name="rms", value=1.0 + 0.1 * k
        )
        for k in range(1, ev.max_depth + 1)
    )
    return c.Measured(curves=tuple(c.MeasuredCurve(curve=k, per_prompt=(), walks=()) for k in curves), diagnostics=rms)


def _profiled(config: c.ProfileCostConfig) -> c.Profiled:
    pass_ms = tuple(10.0 + 2.0 * k for k in range(config.max_depth + 1))
    return c.Profiled(cost=CostProfile(HARDWARE, 1.0, 10.0, pass_ms[-1], pass_ms=pass_ms))


def _stored(result_type, kind: str, checkpoints: str | None, job_hash: str | None):
    """A result with one small file: stored by reference in `checkpoints`, or as bytes without it."""
    config = json.dumps({"kind": kind, "job": job_hash}).encode()
    if checkpoints is None:
        return result_type(metrics={"seconds": 0.0}, files={"config.json": config})
    folder = scratch()
    try:
        (folder / "config.json").write_bytes(config)
        return result_type(metrics={"seconds": 0.0}).by_reference(*publish(folder, checkpoints, job_hash))
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # gone already once published


def instant_job(
    kind: str,
    config: c.JobConfig,
    inputs: dict,
    *,
    num_cpus: float,
    num_gpus: float,
    progress=None,
    checkpoints: str | None = None,
    job_hash: str | None = None,
):
    """The kind's result at once (workers/jobs/run.py:run_job's signature)."""
    if kind in ("train_target", "train_drafter"):
        result = _stored(c.Trained, kind, checkpoints, job_hash)
        return result.model_copy(update={"family": config.drafter.kind}) if kind == "train_drafter" else result
    if kind in ("regenerate", "target_features"):
        return _stored(c.Dataset, kind, checkpoints, job_hash)
    if kind == "measure_curve":
        return _measured(config)
    if kind == "profile_cost":
        return _profiled(config)
    if kind == "select_depth":
        return resolve(job_kind(kind).run)(config, inputs, num_gpus=num_gpus, progress=progress)
    raise ValueError(f"instant jobs: no answer for kind {kind!r}")
