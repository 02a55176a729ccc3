"""Validation against reality: the real speculative engine timed at every depth k = 0..max_depth.

Prompts of the curve's primary condition (held out, or the curve's own) are decoded at every k (k = 0 is plain
decoding, the baseline), with the depths rotated from prompt to prompt so that drifts in machine
speed hit every depth alike.
Only the decoding after the prompt's pass is timed: the prefill is the same work at every k.
Tokens/s at k = the engine's tokens per target pass (pooled over every pass, as acceptance is)
over the median time of one pass (over every decode at k): a burst of load from a neighbour
on the machine then shifts no depth's figure, while acceptance stays exact.
"""

from __future__ import annotations

import torch

from pipeline.core.verdict import EngineBenchmark
from workers.data.prompts import build_prompts
from workers.decoding.chain import generate
from workers.measure.decode_timer import time_decoders


def validation_prompts(tokenizer, evaluation, validation, seed: int) -> list[torch.Tensor]:
    """Prompts of the primary condition: held out (the curve never saw them: the curve's draw,
    continued), or the first of the curve's own (`validation.prompts: curve`)."""
    seen = evaluation.num_prompts if validation.prompts == "heldout" else 0
    return build_prompts(
        tokenizer,
        corpus=evaluation.corpus,
        condition=evaluation.conditions[0],
        num_prompts=seen + validation.num_prompts,
        prompt_len=evaluation.prompt_len,
        long_context_len=evaluation.long_context_len,
        seed=seed,
        answer_prefix=evaluation.answer_prefix,
        prompts_file=evaluation.prompts,
    )[seen:]


def engine_speedups(*, target, proposer, tokenizer, evaluation, validation, seed: int) -> EngineBenchmark:
    """Measured tokens/s, speedup over k = 0 and the engine's accept_len at every k.

    Uses the primary condition and temperature (the ones the depth was chosen for). At
    temperature 0 every depth must reproduce plain decoding token for token; the number of
    prompts where it did not is returned as `greedy_mismatches` (0 unless the engine is wrong
    or the numerics break a near-tie).
    """
    condition, temperature = evaluation.conditions[0], evaluation.temperatures[0]

    def at_depth(k):
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

    timed = time_decoders(
        [at_depth(k) for k in range(evaluation.max_depth + 1)],
        validation_prompts(tokenizer, evaluation, validation, seed),
        next(target.parameters()).device,
        new_tokens=validation.new_tokens or evaluation.continuation_len,
        repeats=validation.repeats,
        warmup_prompts=validation.warmup_prompts,
        temperature=temperature,
        seed=seed,
    )
    tps = timed["tokens_per_s"]
    return EngineBenchmark(
        condition=condition,
        temperature=temperature,
        tokens_per_s=tuple(tps),
        measured_speedup=tuple(t / tps[0] for t in tps),
        engine_accept_len=tuple(timed["accept_len"]),
        greedy_mismatches=timed["greedy_mismatches"],
        tokens=tuple(timed["tokens"]),
        seconds=tuple(timed["seconds"]),
    )
