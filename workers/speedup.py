"""Validation against reality: the real speculative engine timed at every depth k = 0..max_depth.

Held-out prompts that the acceptance curve did not use are decoded at every k (k = 0 is plain decoding, the baseline), with
the depths rotated from prompt to prompt so that drifts in machine speed hit every depth alike.
Only the decoding after the prompt's pass is timed: the prefill is the same work at every k.
Tokens/s at k = the engine's tokens per target pass (pooled over every pass, as acceptance is)
over the median time of one pass (over every decode at k): a burst of load from a neighbour
on the machine then shifts no depth's figure, while acceptance stays exact.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch

from workers.engine import generate
from workers.prompts import build_prompts


@dataclass(frozen=True)
class EngineBenchmark:
    """The engine at every depth k = 0..max_depth (index k), under the primary condition."""

    condition: str
    temperature: float
    tokens_per_s: tuple[float, ...]
    measured_speedup: tuple[float, ...]  # tokens_per_s over depth 0's
    engine_accept_len: tuple[float, ...]  # tokens per target pass
    greedy_mismatches: int
    tokens: tuple[int, ...]
    seconds: tuple[float, ...]


def validation_prompts(tokenizer, evaluation, validation, seed: int) -> list[torch.Tensor]:
    """Held-out prompts of the primary condition that the acceptance curve never saw: the curve's
    draw, continued."""
    seen = evaluation.num_prompts
    return build_prompts(tokenizer, corpus=evaluation.corpus, condition=evaluation.conditions[0],
                         num_prompts=seen + validation.num_prompts, prompt_len=evaluation.prompt_len,
                         long_context_len=evaluation.long_context_len, seed=seed,
                         answer_prefix=evaluation.answer_prefix, prompts_file=evaluation.prompts)[seen:]


def engine_speedups(*, target, proposer, tokenizer, evaluation, validation, seed: int) -> EngineBenchmark:
    """Measured tokens/s, speedup over k = 0 and the engine's accept_len at every k.

    Uses the primary condition and temperature (the ones the depth was chosen for). At
    temperature 0 every depth must reproduce plain decoding token for token; the number of
    prompts where it did not is returned as `greedy_mismatches` (0 unless the engine is wrong
    or the numerics break a near-tie).
    """
    condition, temperature = evaluation.conditions[0], evaluation.temperatures[0]
    max_depth = evaluation.max_depth
    prompts = validation_prompts(tokenizer, evaluation, validation, seed)
    device = next(target.parameters()).device
    depths = list(range(max_depth + 1))
    seconds, tokens, passes = [0.0] * len(depths), [0] * len(depths), [0] * len(depths)
    pass_s: list[list[float]] = [[] for _ in depths]  # seconds per target pass, one entry per decode
    new_tokens = validation.new_tokens or evaluation.continuation_len
    gen = torch.Generator().manual_seed(seed)
    for prompt in prompts[: validation.warmup_prompts]:  # warm-up: allocator, kernels, caches
        for k in depths:
            generate(target, proposer, prompt[None].to(device), max_new=8, depth=k, temperature=temperature, gen=gen,
                     draft_sampling=evaluation.draft_sampling)
    mismatches = 0
    for _ in range(validation.repeats):
        for i, prompt in enumerate(prompts):
            outs = {}
            for k in depths[i % len(depths):] + depths[: i % len(depths)]:
                timing: dict = {}
                out, _ = generate(target, proposer, prompt[None].to(device), max_new=new_tokens, depth=k,
                                  temperature=temperature, gen=gen, timing=timing,
                                  draft_sampling=evaluation.draft_sampling)
                pass_s[k].append(timing["decode_s"] / timing["passes"])
                seconds[k] += timing["decode_s"]
                tokens[k] += timing["tokens"]
                passes[k] += timing["passes"]
                outs[k] = out
            if temperature == 0 and any(outs[k] != outs[0] for k in depths):
                mismatches += 1
    engine_accept_len = [t / p for t, p in zip(tokens, passes)]
    tokens_per_s = [a / statistics.median(s) for a, s in zip(engine_accept_len, pass_s)]
    return EngineBenchmark(
        condition=condition, temperature=temperature, tokens_per_s=tuple(tokens_per_s),
        measured_speedup=tuple(t / tokens_per_s[0] for t in tokens_per_s),
        engine_accept_len=tuple(engine_accept_len), greedy_mismatches=mismatches, tokens=tuple(tokens),
        seconds=tuple(seconds),
    )
