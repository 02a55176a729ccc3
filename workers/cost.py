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
from workers.features import cached_forward, target_pass


def _median_ms(fn, *, warmup: int, repeats: int, device: torch.device) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


@torch.no_grad()
def profile_cost(*, target, drafter, context_len: int, max_depth: int, warmup: int, repeats: int, seed: int) -> CostProfile:
    device = next(target.parameters()).device
    dtype = next(target.parameters()).dtype
    vocab = target.get_output_embeddings().weight.shape[0]
    gen = torch.Generator().manual_seed(seed)
    ctx = torch.randint(3, vocab, (1, context_len), generator=gen).to(device)  # [1, L]
    new = torch.randint(3, vocab, (1, max_depth + 1), generator=gen).to(device)  # [1, k+1]
    _, cache = cached_forward(target, ctx)

    def target_call(n_tokens: int):
        def run():
            cached_forward(target, new[:, :n_tokens], cache)
            cache.crop(-n_tokens)  # drop what the timed call appended (negative: works on old and new transformers)

        return run

    decode_ms = _median_ms(target_call(1), warmup=warmup, repeats=repeats, device=device)
    verify_ms = _median_ms(target_call(max_depth + 1), warmup=warmup, repeats=repeats, device=device)

    streams, _ = target_pass(target, ctx, drafter.cfg.capture_layers)
    ddtype = drafter.fc.weight.dtype
    g0 = drafter.fuse([s[:, :-1].to(ddtype) for s in streams])
    d_cache, logits, chain = drafter.prefill(ctx[:, 1:], g0)
    token = logits.argmax(-1)
    draft_ms = _median_ms(
        lambda: drafter.step(token, chain, d_cache, context_len - 1), warmup=warmup, repeats=repeats, device=device
    )
    return CostProfile(hardware=hardware_id(device, dtype), draft_ms=draft_ms, decode_ms=decode_ms, verify_ms=verify_ms)
