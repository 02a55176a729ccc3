"""Validation of the tree choice: the engine with the chosen tree, its neighbours by size, the chain at
its chosen depth and plain decoding, timed side by side on the held-out prompts.

Trees draft the drafter's top-k siblings (verified one-hot at temperature above 0), which is what
their choice predicted; the chain drafts as the curve did (evaluation.draft_sampling).
"""

from __future__ import annotations

from workers.decoding.chain import generate
from workers.decoding.tree_engine import generate_tree
from workers.measure.decode_timer import time_decoders
from workers.measure.speedup import validation_prompts


def tree_benchmark(*, target, proposer, tokenizer, evaluation, validation, seed: int, trees, chain_depth: int) -> dict:
    """time_decoders' figures for [plain decoding, the chain at chain_depth, *trees]."""
    temperature = evaluation.temperatures[0]

    def chain(k):
        return lambda prompt, max_new, gen, timing: generate(
            target,
            proposer,
            prompt,
            max_new=max_new,
            depth=k,
            temperature=temperature,
            gen=gen,
            timing=timing,
            draft_sampling=evaluation.draft_sampling,
        )[0]

    def tree(t):
        return lambda prompt, max_new, gen, timing: generate_tree(
            target,
            proposer,
            prompt,
            max_new=max_new,
            tree=t,
            temperature=temperature,
            gen=gen,
            timing=timing,
            draft_sampling="greedy",
        )[0]

    return time_decoders(
        [chain(0), chain(chain_depth), *(tree(t) for t in trees)],
        validation_prompts(tokenizer, evaluation, validation, seed),
        next(target.parameters()).device,
        new_tokens=validation.new_tokens or evaluation.continuation_len,
        repeats=validation.repeats,
        warmup_prompts=validation.warmup_prompts,
        temperature=temperature,
        seed=seed,
    )
