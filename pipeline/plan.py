"""Planning: an experiment spec becomes a graph of jobs, each keyed by a content hash.

train_target (built-in targets only) -> train_drafter [-> distill_drafter, for a drafter with a
`distill` stage] -> measure_curve, profile_cost -> select_depth [-> measure_speedup, when the spec
asks for validation] [-> serve_check, when it names a serving engine]. Each job carries its
kind's typed config (pipeline/core/contracts.py). A job's hash covers exactly what determines
its result: its kind, its config, the hashes of its inputs and its kind's code version. An
unchanged job keeps its hash, so a rerun reuses its finished result.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.core import contracts as c
from pipeline.core.kinds import kind as job_kind
from pipeline.core.settings import CostTiming, TimedPrompts, Validation
from pipeline.spec import ExperimentSpec, Target


@dataclass(frozen=True)
class Job:
    kind: str
    name: str  # a label for people, e.g. "measure_curve tiny-code/eagle3-pre"
    config: c.JobConfig = field(hash=False)
    deps: tuple[tuple[str, str], ...]  # (input name, job hash)
    hash: str
    num_cpus: float
    num_gpus: float
    target: str | None = None
    drafter: str | None = None
    time_limit_s: float | None = None  # stopped and failed when it runs longer (resources.<kind>.time_limit_s)
    accelerator_type: str | None = None  # the GPU model it must run on (Ray's accelerator_type)


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
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def build_plan(
    spec: ExperimentSpec, code_version: Callable[[tuple[str, ...] | None], str] | str, worker: c.WorkerEnv | None = None
) -> Plan:
    """code_version: a function of the modules a job runs (None: the whole code base), or one
    string for every job. worker: what a worker placed like the timing jobs reports
    (pipeline/run/probe.py), part of their identity; None leaves it out."""
    version = code_version if callable(code_version) else (lambda modules=None: code_version)
    jobs: dict[str, Job] = {}

    def identity(kind: str, fields: dict, deps: dict[str, str]) -> tuple[c.JobConfig, str]:
        """A job's config and hash, without adding it to the plan."""
        res = spec.resources_for(kind)
        entry = job_kind(kind)
        config = entry.config(
            seed=spec.seed, **fields, **_placement(kind, res.num_cpus, res.num_gpus, res.accelerator_type, worker)
        )
        return config, job_hash(kind, config.hashed(), deps, version(entry.code_of(config)))

    def add(
        kind: str,
        name: str,
        fields: dict,
        deps: dict[str, str],
        target: str,
        drafter: str | None = None,
        *,
        named: dict[str, str] | None = None,
    ):
        """named: the inputs its hash names where they differ from those it reads (`deps`)."""
        res = spec.resources_for(kind)
        if res.workers > 1:  # a group of Ray Train workers, each given what the resources say; the
            # job's own task only starts it and waits (pipeline/run/ray_cluster.py)
            group = res.model_dump(include={"workers", "sharding", "num_cpus", "num_gpus", "accelerator_type"})
            fields = {**fields, "group": group}
            res = res.model_copy(update={"num_cpus": 0, "num_gpus": 0, "accelerator_type": None})
        config, h = identity(kind, fields, deps if named is None else named)
        if h not in jobs:
            jobs[h] = Job(
                kind,
                name,
                config,
                tuple(sorted(deps.items())),
                h,
                res.num_cpus,
                res.num_gpus,
                target,
                drafter,
                res.time_limit_s,
                res.accelerator_type,
            )
        return h

    trained_targets: dict[str, str] = {}
    timing = CostTiming(**spec.cost.model_dump(include=set(CostTiming.model_fields)))
    for target, drafter in spec.pairing_list():
        ref = _target_ref(target)
        deps = {}
        if target.builtin is not None:
            if target.name not in trained_targets:
                trained_targets[target.name] = add(
                    "train_target", f"train_target {target.name}", {"builtin": target.builtin}, {}, target.name
                )
            deps["target"] = trained_targets[target.name]
        pair, t, d = f"{target.name}/{drafter.name}", target.name, drafter.name
        evaluation = spec.evaluation_for(drafter)
        inputs = dict(deps)
        data, named = _training_data(add, identity, spec, ref, drafter, deps) if drafter.trained_here else ({}, {})
        if drafter.trained_here:
            inputs["drafter"] = add(
                "train_drafter",
                f"train_drafter {pair}",
                {"target": ref, "drafter": drafter},
                {**deps, **data},
                t,
                d,
                named={**deps, **named},
            )
        stage = getattr(drafter, "distill", None)  # an EAGLE-3 drafter's stage after its own training
        if stage is not None:
            questions = spec.training_data.model_dump(include={"max_prompt_tokens", "prompts"})
            imitation = data if stage.method == "imitation" else {}  # the control trains on the drafter's own text
            inputs["drafter"] = add(
                "distill_drafter",
                f"distill_drafter {pair}",
                {"target": ref, "drafter": drafter, **questions},
                {**inputs, **imitation},
                t,
                d,
            )
        models = {"target": ref, "drafter": drafter}
        curve = add("measure_curve", f"measure_curve {pair}", {**models, "evaluation": evaluation}, inputs, t, d)
        if spec.cost.timed_by == "vllm":  # the serving engine's own clock
            engine = {"evaluation": evaluation, "validation": spec.validation or Validation(), "serving": spec.serving}
            cost = add("engine_cost", f"engine_cost {pair}", {**models, **engine, "cost": timing}, inputs, t, d)
        else:
            cost = add(
                "profile_cost",
                f"profile_cost {pair}",
                {**models, "cost": timing, "max_depth": evaluation.max_depth, "prompts": TimedPrompts.of(evaluation)},
                inputs,
                t,
                d,
            )
        depth = add(
            "select_depth",
            f"select_depth {pair}",
            {
                "target": t,
                "drafter": d,
                "cost_ratio": spec.cost.cost_ratio,
                "max_batch_size": spec.cost.schedule_end,
                "draft_sampling": evaluation.draft_sampling,
                "block_drafting": getattr(drafter, "block_drafting", None),  # a DFlash drafter's only
            },
            {"curve": curve, "cost": cost},
            t,
            d,
        )
        if spec.serving is not None:
            add(
                "serve_check",
                f"serve_check {pair}",
                {
                    **models,
                    "evaluation": evaluation,
                    "validation": spec.validation or Validation(),
                    "serving": spec.serving,
                },
                {**inputs, "curve": curve, "cost": cost, "depth": depth},
                t,
                d,
            )
        if spec.validation is not None:
            add(
                "measure_speedup",
                f"measure_speedup {pair}",
                {**models, "evaluation": evaluation, "validation": spec.validation},
                {**inputs, "depth": depth},
                t,
                d,
            )
    return Plan(spec.content_hash(), version(None), tuple(jobs.values()))


def _training_data(add, identity, spec: ExperimentSpec, ref: c.TargetRef, drafter, deps: dict):
    """The jobs a drafter trained on its target's own text needs: the text (one per target) and, for
    a drafter that reads target states, those states: one target pass per target, at every layer
    that the rules of its drafters read. -> (the inputs it reads, the inputs its hash names).

    Its hash names the states of its own rule alone, the same values at the layers it reads: a
    drafter added to the spec with other layers re-runs the target pass, not the other trainings.
    """
    if drafter.training_corpus != "regenerated":
        return {}, {}
    data = add("regenerate", f"regenerate {ref.name}", {"target": ref, "data": spec.training_data}, deps, ref.name)
    own = drafter.target_states
    if own is None:
        return {"data": data}, {"data": data}
    rules = sorted(
        {
            tuple(sorted(d.target_states.items()))
            for t, d in spec.pairing_list()
            if t.name == ref.name and d.trained_here and d.training_corpus == "regenerated" and d.target_states
        },
        key=repr,
    )
    features = add(
        "target_features",
        f"target_features {ref.name}",
        {"target": ref, "rules": [dict(r) for r in rules]},
        {**deps, "data": data},
        ref.name,
    )
    _, alone = identity("target_features", {"target": ref, "rules": [own]}, {**deps, "data": data})
    return {"data": data, "features": features}, {"data": data, "features": alone}


def _placement(
    kind: str, num_cpus: float, num_gpus: float, accelerator_type: str | None, worker: c.WorkerEnv | None
) -> dict:
    """The part of a job's resources that can change its result, as its kind declares.

    The device kind decides dtype ('auto') and numerics of every torch job; timings also depend
    on how many CPU threads and GPUs the job had, on which GPU model when the spec names one, and
    on the worker's own report (device model, CUDA, driver, library releases). Resources that
    change nothing (a select job's CPUs) stay out of the config and so out of the hash.
    """
    placement = job_kind(kind).placement
    if placement == "none":
        return {}
    device = {"device": "cuda" if num_gpus > 0 else "cpu"}
    if placement == "device":
        return device
    return {
        **device,
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "accelerator_type": accelerator_type,
        "worker": worker,
    }


def _target_ref(target: Target) -> c.TargetRef:
    return c.TargetRef(name=target.name, hf=target.hf, gguf=target.gguf, package=target.package, dtype=target.dtype)
