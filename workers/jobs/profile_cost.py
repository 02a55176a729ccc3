"""profile_cost: drafter step, target passes and whole engine iterations, timed on this worker."""

from __future__ import annotations

from pipeline.core.contracts import ProfileCostConfig, Profiled
from workers.data.prompts import build_prompts
from workers.drafters.pairing import load_pairing
from workers.measure.cost import profile_cost
from workers.runtime.device import pick_device, split_gpus


def run(config: ProfileCostConfig, inputs: dict, *, num_gpus: float, progress) -> Profiled:
    device = pick_device(num_gpus)
    target, tokenizer, family, drafter = load_pairing(
        config.target, config.drafter, inputs, device, split_gpus(num_gpus)
    )
    c, p = config.cost, config.prompts
    prompts = build_prompts(
        tokenizer,
        corpus=p.corpus,
        condition=p.condition,
        num_prompts=p.num_prompts,
        prompt_len=p.prompt_len,
        long_context_len=p.long_context_len,
        seed=config.seed,
        answer_prefix=p.answer_prefix,
        prompts_file=p.prompts,
    )
    cost = profile_cost(
        target=target,
        drafter=drafter,
        family=family,
        context_len=c.context_len,
        max_depth=config.max_depth,
        warmup=c.warmup,
        repeats=c.repeats,
        seed=config.seed,
        prompts=prompts,
        new_tokens=p.new_tokens,
        batch_sizes=tuple(c.batch_sizes),
        tree_budget=c.tree_budget if family.drafts_trees else 0,  # a family that drafts no tree times none
    )
    return Profiled(cost=cost)
