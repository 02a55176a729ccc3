"""Decoders timed side by side on the same prompts, as validation and the cost table time the engine.

The order of the decoders is rotated from prompt to prompt, so that a drift in machine speed hits
every decoder alike, and a decoder's figure is the median over its decodes of seconds per target
pass: a burst of load from a neighbour on the machine shifts no decoder's figure, while the tokens
per pass stay exact.
"""

from __future__ import annotations

import statistics

import torch


def time_decoders(
    decoders: list,
    prompts: list[torch.Tensor],
    device,
    *,
    new_tokens: int,
    repeats: int,
    warmup_prompts: int,
    temperature: float,
    seed: int,
) -> dict:
    """Time decoders side by side on the same prompts: each is `fn(prompt [1, P], max_new, gen, timing)`
    returning the tokens (workers/engine.generate's timing). The order is rotated from prompt to
    prompt. Returns lists aligned with `decoders`: tokens_per_s (tokens per pass pooled over every
    pass, over the median seconds of one pass), pass_s (that median), accept_len, tokens, seconds;
    and greedy_mismatches: at temperature 0, the prompts where some decoder's output differs from
    the first one's."""
    n = len(decoders)
    seconds, tokens, passes = [0.0] * n, [0] * n, [0] * n
    pass_s: list[list[float]] = [[] for _ in range(n)]  # seconds per target pass, one entry per decode
    gen = torch.Generator().manual_seed(seed)
    for prompt in prompts[:warmup_prompts]:  # warm-up: allocator, kernels, caches
        for fn in decoders:
            fn(prompt[None].to(device), 8, gen, {})
    mismatches = 0
    for _ in range(repeats):
        for i, prompt in enumerate(prompts):
            outs = {}
            for d in [*range(n)][i % n :] + [*range(n)][: i % n]:
                timing: dict = {}
                outs[d] = decoders[d](prompt[None].to(device), new_tokens, gen, timing)
                pass_s[d].append(timing["decode_s"] / timing["passes"])
                seconds[d] += timing["decode_s"]
                tokens[d] += timing["tokens"]
                passes[d] += timing["passes"]
            if temperature == 0 and any(outs[d] != outs[0] for d in range(n)):
                mismatches += 1
    accept_len = [t / p for t, p in zip(tokens, passes)]
    return {
        "tokens_per_s": [a / statistics.median(s) for a, s in zip(accept_len, pass_s)],
        "pass_s": [statistics.median(s) for s in pass_s],
        "accept_len": accept_len,
        "tokens": tokens,
        "seconds": seconds,
        "greedy_mismatches": mismatches,
    }
