"""Planning: an experiment spec becomes a graph of jobs, each keyed by a content hash.

train_target (built-in targets only) -> train_drafter -> measure_curve, profile_cost
-> select_depth [-> measure_speedup, when the spec asks for validation]. A job's hash covers exactly what determines its result: its kind, its
config, the hashes of its inputs and the code version. An unchanged job keeps its hash, so a
rerun reuses its finished result.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.spec import ExperimentSpec, Target


@dataclass(frozen=True)
class Job:
    kind: str
    name: str  # a label for people, e.g. "measure_curve tiny-code/eagle3-pre"
    config: dict = field(hash=False)
    deps: tuple[tuple[str, str], ...]  # (input name, job hash)
    hash: str
    num_cpus: float
    num_gpus: float
    target: str | None = None
    drafter: str | None = None


@dataclass(frozen=True)
class Plan:
    spec_hash: str
    code_version: str
    jobs: tuple[Job, ...]  # dependencies always come before their dependents

    def by_hash(self) -> dict[str, Job]:
        return {j.hash: j for j in self.jobs}


def job_hash(kind: str, config: dict, deps: dict[str, str], code_version: str) -> str:
    blob = json.dumps(
        {"kind": kind, "config": config, "deps": deps, "code": code_version},
        sort_keys=True, separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def build_plan(spec: ExperimentSpec, code_version: Callable[[str | None], str] | str) -> Plan:
    """code_version: a function of the job kind (None: the whole code base), or one string for all."""
    version = code_version if callable(code_version) else (lambda kind=None: code_version)
    jobs: dict[str, Job] = {}

    def add(kind: str, name: str, config: dict, deps: dict[str, str], target=None, drafter=None) -> str:
        res = spec.resources_for(kind)
        config = {**config, **_placement(kind, res.num_cpus, res.num_gpus)}
        h = job_hash(kind, config, deps, version(kind))
        if h not in jobs:
            jobs[h] = Job(kind, name, config, tuple(sorted(deps.items())), h,
                          res.num_cpus, res.num_gpus, target, drafter)
        return h

    target_jobs: dict[str, str] = {}
    for target, drafter in spec.pairing_list():
        source = _target_source(spec, target)
        deps = {}
        if target.builtin is not None:
            if target.name not in target_jobs:
                target_jobs[target.name] = add(
                    "train_target", f"train_target {target.name}",
                    {"builtin": target.builtin.model_dump(mode="json"), "seed": spec.seed}, {}, target.name,
                )
            deps["target"] = target_jobs[target.name]
        pair = f"{target.name}/{drafter.name}"
        d_cfg = drafter.model_dump(mode="json", exclude={"name"})
        inputs = dict(deps)
        if getattr(drafter, "hf", None) is None:  # an hf standalone drafter is used as it is
            inputs["drafter"] = add("train_drafter", f"train_drafter {pair}",
                                    {**source, "drafter": d_cfg, "seed": spec.seed}, deps, target.name, drafter.name)
        else:
            source = {**source, "drafter_hf": drafter.hf}
        source = {**source, "drafter_kind": drafter.kind}
        names = {"target": target.name, "drafter": drafter.name}
        curve = add("measure_curve", f"measure_curve {pair}",
                    {**source, **names, "evaluation": spec.evaluation.model_dump(mode="json"), "seed": spec.seed},
                    inputs, target.name, drafter.name)
        cost = add("profile_cost", f"profile_cost {pair}",
                   {**source, "cost": spec.cost.model_dump(mode="json", exclude={"cost_ratio", "max_batch_size"}),
                    "max_depth": spec.evaluation.max_depth, "seed": spec.seed},
                   inputs, target.name, drafter.name)
        depth = add("select_depth", f"select_depth {pair}",
                    {**names, "cost_ratio": spec.cost.cost_ratio, "seed": spec.seed,
                     "max_batch_size": spec.cost.max_batch_size},
                    {"curve": curve, "cost": cost}, target.name, drafter.name)
        if spec.validation is not None:
            add("measure_speedup", f"measure_speedup {pair}",
                {**source, **names, "evaluation": spec.evaluation.model_dump(mode="json"),
                 "validation": spec.validation.model_dump(mode="json"), "seed": spec.seed},
                {**inputs, "depth": depth}, target.name, drafter.name)
    return Plan(spec.content_hash(), version(None), tuple(jobs.values()))


def _placement(kind: str, num_cpus: float, num_gpus: float) -> dict:
    """The part of a job's resources that can change its result.

    The device kind decides dtype ('auto') and numerics of every torch job; timings also depend
    on how many CPU threads the job had. Resources that change nothing (a select job's CPUs)
    stay out of the hash.
    """
    if kind == "select_depth":
        return {}
    placement = {"device": "cuda" if num_gpus > 0 else "cpu"}
    if kind in ("profile_cost", "measure_speedup"):  # timings
        placement["num_cpus"] = num_cpus
        placement["num_gpus"] = num_gpus
    return placement


def _target_source(spec: ExperimentSpec, target: Target) -> dict:
    """What identifies the target inside a job config besides its training job's hash."""
    source = {"dtype": target.dtype}
    if target.hf is not None:
        source["target_hf"] = target.hf
    return source
