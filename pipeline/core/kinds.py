"""The registry of job kinds: each kind declared once, with everything that belongs to it.

A kind is its typed config and result, the inputs it takes (results of other kinds), the
function that runs it on a worker, the function that records its result on the driver, the
modules its code version starts from, its default resources and which of its resources
change its result. The
planner, the executor, the recorder and the code versions all read this table; adding a
kind is adding one entry here and the modules it names.

Functions are named as "module:function" and imported only when used, so this module (and
every worker importing it) pulls in neither torch nor the driver's libraries.

The kinds, with their inputs and what their result holds (configs and results are frozen
pydantic models, pipeline/core/contracts.py; each runs in workers/jobs/<kind>.py, except
select_depth in pipeline/core/select.py, and is recorded by pipeline/run/record.py):
- train_target (built-in targets only) -> Trained;
- regenerate (target) -> Dataset: the target's answers, with the positions that carry a loss;
- target_features (target, data) -> Dataset: the target's states at the captured layers and
  its last one;
- train_drafter (target, data, features) -> Trained, with its drafter family;
- distill_drafter (target, drafter, data, features) -> Trained: the spec's `distill` stage (Draft-OPD
  or a control) on the trained drafter, which every later job of the pairing then uses;
- measure_curve (target, drafter) -> Measured: curves, per-prompt data, drift diagnostics;
- profile_cost (target, drafter) -> Profiled: a CostProfile;
- select_depth (curve, cost) -> Selected: the choice, its cost model, the schedule;
- measure_speedup (target, drafter, depth) -> Validated: the engine benchmark and its verdict;
- engine_cost (target, drafter) -> Profiled: the same, timed by the serving engine itself (with
  `cost.timed_by: vllm`, in place of profile_cost);
- serve_check (target, drafter, curve, cost, depth) -> Served: a real serving engine (vLLM) serving
  the printed config and a depth sweep per batch size, and its verdict.
What of a job's resources changes its result (`placement`): nothing (select_depth), the device
kind (dtype and numerics), or, for the timing jobs profile_cost and measure_speedup, the whole
placement.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pipeline.core import contracts as c
from pipeline.core.settings import Resources
from workers.drafters.registry import entry


def _trainer_module(config) -> tuple[str, ...]:
    """A train_drafter job runs (and its code version covers) only its own family's trainer
    (workers/drafters/registry.py, which names modules and imports nothing)."""
    return (entry(config.drafter.kind).trainer_module,)


def _family_module(config) -> tuple[str, ...]:
    """A job that measures a drafter runs its own family's package only (its family object and
    what that imports): changing one family re-measures no drafter of another."""
    return (entry(config.drafter.kind).family_module,)


@dataclass(frozen=True)
class JobKind:
    name: str
    config: type[c.JobConfig]
    result: type[c.Contract]
    inputs: dict[str, type[c.Contract]]  # input name -> the result type it carries (each optional)
    run: str  # "module:function(config, inputs, *, num_gpus, progress) -> result", on a worker
    record: str  # "module:function(job, result, recording) -> None", on the driver (pipeline/run/record.py)
    code: tuple[str, ...]  # modules whose source, with everything they import, is the code version
    # what of the job's resources changes its result: nothing, the device kind (dtype and
    # numerics), or the whole placement (timings)
    placement: Literal["none", "device", "timed"]
    # modules a job runs because of its config (a drafter family's trainer), beside `code`
    config_code: Callable[[c.JobConfig], tuple[str, ...]] | None = None
    # what one job asks the cluster for unless the spec's `resources.<kind>` says otherwise
    resources: Resources = Resources()

    def code_of(self, config: c.JobConfig) -> tuple[str, ...]:
        """The modules one job of this kind runs: the kind's, and those its config selects."""
        return self.code + (self.config_code(config) if self.config_code else ())


_DISPATCH = ("workers.jobs.run",)  # the dispatcher every kind runs through

KINDS: dict[str, JobKind] = {
    k.name: k
    for k in (
        JobKind(
            "train_target",
            c.TrainTargetConfig,
            c.Trained,
            {},
            "workers.jobs.train_target:run",
            "pipeline.run.record:record_trained",
            (*_DISPATCH, "workers.jobs.train_target"),
            "device",
        ),
        JobKind(
            "regenerate",
            c.RegenerateConfig,
            c.Dataset,
            {"target": c.Trained},
            "workers.jobs.regenerate:run",
            "pipeline.run.record:record_dataset",
            (*_DISPATCH, "workers.jobs.regenerate"),
            "device",
        ),
        JobKind(
            "target_features",
            c.TargetFeaturesConfig,
            c.Dataset,
            {"target": c.Trained, "data": c.Dataset},
            "workers.jobs.target_features:run",
            "pipeline.run.record:record_dataset",
            (*_DISPATCH, "workers.jobs.target_features"),
            "device",
        ),
        JobKind(
            "train_drafter",
            c.TrainDrafterConfig,
            c.Trained,
            {"target": c.Trained, "data": c.Dataset, "features": c.Dataset},
            "workers.jobs.train_drafter:run",
            "pipeline.run.record:record_trained",
            (*_DISPATCH, "workers.jobs.train_drafter"),
            "device",
            _trainer_module,
        ),
        JobKind(
            "distill_drafter",
            c.DistillDrafterConfig,
            c.Trained,
            {"target": c.Trained, "drafter": c.Trained, "data": c.Dataset, "features": c.Dataset},
            "workers.jobs.distill_drafter:run",
            "pipeline.run.record:record_trained",
            (*_DISPATCH, "workers.jobs.distill_drafter"),
            "device",
            _family_module,  # a `path` checkpoint is read by its family
        ),
        JobKind(
            "measure_curve",
            c.MeasureCurveConfig,
            c.Measured,
            {"target": c.Trained, "drafter": c.Trained},
            "workers.jobs.measure_curve:run",
            "pipeline.run.record:record_measured",
            (*_DISPATCH, "workers.jobs.measure_curve"),
            "device",
            _family_module,
        ),
        JobKind(
            "profile_cost",
            c.ProfileCostConfig,
            c.Profiled,
            {"target": c.Trained, "drafter": c.Trained},
            "workers.jobs.profile_cost:run",
            "pipeline.run.record:record_profiled",
            (*_DISPATCH, "workers.jobs.profile_cost"),
            "timed",
            _family_module,
        ),
        JobKind(
            "engine_cost",
            c.EngineCostConfig,
            c.Profiled,
            {"target": c.Trained, "drafter": c.Trained},
            "workers.jobs.engine_cost:run",
            "pipeline.run.record:record_profiled",
            (*_DISPATCH, "workers.jobs.engine_cost", "workers.serving.vllm_side"),
            "timed",
            _family_module,  # the drafter is exported by its family
        ),
        JobKind(
            "select_depth",
            c.SelectDepthConfig,
            c.Selected,
            {"curve": c.Measured, "cost": c.Profiled},
            "pipeline.core.select:run",
            "pipeline.run.record:record_selected",
            (*_DISPATCH, "pipeline.core.select"),
            "none",
        ),
        JobKind(
            "measure_speedup",
            c.MeasureSpeedupConfig,
            c.Validated,
            {"target": c.Trained, "drafter": c.Trained, "depth": c.Selected},
            "workers.jobs.measure_speedup:run",
            "pipeline.run.record:record_validated",
            (*_DISPATCH, "workers.jobs.measure_speedup"),
            "timed",
            _family_module,
        ),
        JobKind(
            "serve_check",
            c.ServeCheckConfig,
            c.Served,
            {"target": c.Trained, "drafter": c.Trained, "curve": c.Measured, "cost": c.Profiled, "depth": c.Selected},
            "workers.jobs.serve_check:run",
            "pipeline.run.record:record_served",
            # vllm_side.py runs in the engine's own environment: started as a file, imported by nobody
            (*_DISPATCH, "workers.jobs.serve_check", "workers.serving.vllm_side"),
            "timed",
            _family_module,
        ),
    )
}
JOB_KINDS = tuple(KINDS)


def kind(name: str) -> JobKind:
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unknown job kind {name!r}; known: {', '.join(KINDS)}") from None


def resolve(path: str):
    """The object a "module:attribute" path names, imported now."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)
