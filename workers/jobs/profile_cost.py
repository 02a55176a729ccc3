"""profile_cost: drafter step, target passes and whole engine iterations, timed on this worker."""
from __future__ import annotations

from pipeline.core.contracts import ProfileCostConfig, Profiled
from workers.cost import profile_cost
from workers.device import pick_device
from workers.family import family_of
from workers.models import load_target


def run(config: ProfileCostConfig, inputs: dict, *, num_gpus: float, progress) -> Profiled:
    device = pick_device(num_gpus)
    target, _ = load_target(config.target, inputs.get("target"), device)
    family = family_of(config.drafter.kind)
    drafter = family.load(config.drafter, inputs.get("drafter"), target)
    c = config.cost
    cost = profile_cost(target=target, drafter=drafter, family=family, context_len=c.context_len,
                        max_depth=config.max_depth, warmup=c.warmup, repeats=c.repeats, seed=config.seed,
                        batch_sizes=tuple(c.batch_sizes))
    return Profiled(cost=cost)
