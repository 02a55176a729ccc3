"""The registry of job kinds: each kind declared once, with everything that belongs to it.

A kind is its typed config and result, the inputs it takes (results of other kinds), the
function that runs it on a worker, the function that records its result on the driver, the
modules its code version starts from, and which of its resources change its result. The
planner, the executor, the recorder and the code versions all read this table; adding a
kind is adding one entry here and the modules it names.

Functions are named as "module:function" and imported only when used, so this module (and
every worker importing it) pulls in neither torch nor the driver's libraries.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Literal

from pipeline.core import contracts as c


@dataclass(frozen=True)
class JobKind:
    name: str
    config: type[c.JobConfig]
    result: type[c.Contract]
    inputs: dict[str, type[c.Contract]]  # input name -> the result type it carries (each optional)
    run: str  # "module:function(config, inputs, *, num_gpus, progress) -> result", on a worker
    record: str  # "module:function(job, result, ctx) -> None", on the driver
    code: tuple[str, ...]  # modules whose source, with everything they import, is the code version
    # what of the job's resources changes its result: nothing, the device kind (dtype and
    # numerics), or the whole placement (timings)
    placement: Literal["none", "device", "timed"]


_TRAIN = ("workers.jobs.run",)  # the dispatcher every kind runs through

KINDS: dict[str, JobKind] = {k.name: k for k in (
    JobKind("train_target", c.TrainTargetConfig, c.Trained, {},
            "workers.jobs.train_target:run", "pipeline.record:record_trained",
            (*_TRAIN, "workers.jobs.train_target"), "device"),
    JobKind("train_drafter", c.TrainDrafterConfig, c.Trained, {"target": c.Trained},
            "workers.jobs.train_drafter:run", "pipeline.record:record_trained",
            (*_TRAIN, "workers.jobs.train_drafter", "workers.eagle_train", "workers.standalone"), "device"),
    JobKind("measure_curve", c.MeasureCurveConfig, c.Measured, {"target": c.Trained, "drafter": c.Trained},
            "workers.jobs.measure_curve:run", "pipeline.record:record_measured",
            (*_TRAIN, "workers.jobs.measure_curve"), "device"),
    JobKind("profile_cost", c.ProfileCostConfig, c.Profiled, {"target": c.Trained, "drafter": c.Trained},
            "workers.jobs.profile_cost:run", "pipeline.record:record_profiled",
            (*_TRAIN, "workers.jobs.profile_cost"), "timed"),
    JobKind("select_depth", c.SelectDepthConfig, c.Selected, {"curve": c.Measured, "cost": c.Profiled},
            "pipeline.core.select:run", "pipeline.record:record_selected",
            (*_TRAIN, "pipeline.core.select"), "none"),
    JobKind("measure_speedup", c.MeasureSpeedupConfig, c.Validated,
            {"target": c.Trained, "drafter": c.Trained, "depth": c.Selected},
            "workers.jobs.measure_speedup:run", "pipeline.record:record_validated",
            (*_TRAIN, "workers.jobs.measure_speedup"), "timed"),
)}
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
