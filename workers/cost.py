"""Cost profiling on the worker's own device: one drafter step, one target decode, one verify.

All three are timed against a cached context of `context_len` tokens (the KV cache is built
once and cropped back after every timed call), warm-up calls excluded, median of repeats.
"""
from __future__ import annotations

import statistics
import time

import torch

from pipeline.types import CostProfile
from workers.device import hardware_id
from workers.features import cached_forward_states, target_pass


def _interleaved_medians(fns: dict, *, warmup: int, repeats: int, device: torch.device) -> dict[str, float]:
    """Median milliseconds of each call, timed in alternating rounds.

    Alternating means a burst of load from a neighbour on the machine hits every measurement
    alike instead of inflating one of them, so the ratio between them stays honest.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times[name].append((time.perf_counter() - t0) * 1000.0)
    return {name: statistics.median(ts) for name, ts in times.items()}


@torch.no_grad()
def _draft_step(drafter, target, ctx: torch.Tensor, context_len: int):
    """A closure running one drafter step against a cached context of context_len tokens."""
    if not hasattr(drafter, "cfg"):  # a standalone causal LM: one decode step, cache cropped back
        _, cache, _ = cached_forward_states(drafter, ctx[:, :-1])
        last = ctx[:, -1:]

        def run():
            cached_forward_states(drafter, last, cache)
            cache.crop(-1)

        return run
    streams, _ = target_pass(target, ctx, drafter.cfg.capture_layers)
    g0 = drafter.fuse([s[:, :-1].to(drafter.fc.weight.dtype) for s in streams])
    d_cache, logits, chain = drafter.prefill(ctx[:, 1:], g0)  # cached positions 0..L-2
    token = drafter.full_logits(logits).argmax(-1)
    return lambda: drafter.step(token, chain, d_cache, context_len - 1)


@torch.no_grad()
def profile_cost(*, target, drafter, context_len: int, max_depth: int, warmup: int, repeats: int, seed: int) -> CostProfile:
    device = next(target.parameters()).device
    dtype = next(target.parameters()).dtype
    vocab = target.get_output_embeddings().weight.shape[0]
    gen = torch.Generator().manual_seed(seed)
    ctx = torch.randint(3, vocab, (1, context_len), generator=gen).to(device)  # [1, L]
    new = torch.randint(3, vocab, (1, max_depth + 1), generator=gen).to(device)  # [1, k+1]
    _, cache, _ = cached_forward_states(target, ctx)

    def target_call(n_tokens: int):
        def run():
            cached_forward_states(target, new[:, :n_tokens], cache)
            cache.crop(-n_tokens)  # drop what the timed call appended (negative: works on old and new transformers)

        return run

    ms = _interleaved_medians(
        {
            "draft_ms": _draft_step(drafter, target, ctx, context_len),
            "decode_ms": target_call(1),
            "verify_ms": target_call(max_depth + 1),
        },
        warmup=warmup, repeats=repeats, device=device,
    )
    return CostProfile(hardware=hardware_id(device, dtype), **ms)
