"""Cost profiling on the worker's own device: drafter step, target decode and verify, engine pass.

All three are timed against a cached context of `context_len` tokens (the KV cache is built
once and cropped back after every timed call), warm-up calls excluded, median of repeats.

The cost ratio is c = draft_ms / decode_ms, both medians. Profiling also times one whole
iteration of the real engine at every depth, `pass_ms[k]`: k drafter forwards, the verify pass
and the engine's own bookkeeping (`pass_ms[0]` is a plain decode step), decoding the curve's own
prompts as validation decodes its held-out ones, with the depths interleaved, in two blocks: half
the prompts first thing and the other half last, so that the profile records how far the timing
moved in between (pipeline/core/timing_noise.py). With
`cost.batch_sizes` (say [1, 8, 32, 128]) it also times, at every batch size B, one drafter step
and a target pass over k+1 new tokens for every k.

For draft trees (`cost.tree_budget`), per batch size: target passes over 1..tree_budget+1
tokens under a tree mask and drafter passes over 1..tree_budget nodes, at every size up to 8,
then four sizes per doubling (10, 12, 14, 16, 20, ...) and the largest; the sizes between are
read off straight lines, so a budget of 64 times 21 sizes, not 65. The tree engine's whole
iteration is timed too (`tree_pass_ms`). How the choices use all this: pipeline/core/choice.py
and pipeline/core/tree_choice.py.
"""

from __future__ import annotations

import statistics

import torch

from pipeline.core.timing_noise import mean_blocks
from pipeline.core.types import CostProfile
from workers.decoding.chain import clock
from workers.models.features import cached_forward_states, tree_forward_states
from workers.runtime.device import hardware_of


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
            t0 = clock(device)
            fn()
            times[name].append((clock(device) - t0) * 1000.0)
    return {name: statistics.median(ts) for name, ts in times.items()}


@torch.no_grad()
def profile_cost(
    *,
    target,
    drafter,
    family,
    context_len: int,
    max_depth: int,
    warmup: int,
    repeats: int,
    seed: int,
    prompts: list[torch.Tensor],
    new_tokens: int,
    batch_sizes: tuple[int, ...] = (1,),
    tree_budget: int = 0,
) -> CostProfile:
    """Per batch size B: one drafter step, and target passes over k+1 new tokens for k = 0..max_depth
    (k = 0 is plain decoding), each for B sequences against a cached context of context_len.
    With a tree budget, also the target over m = 1..max(tree_budget, max_depth) + 1 new tokens under
    a tree attention mask (the chain of every depth is costed as a tree too), one drafter pass over
    w = 1..tree_budget tree nodes per sequence (both timed at `timed_sizes`, the sizes between read
    off a straight line), and at batch size 1 the engine's (and the tree engine's) whole iteration,
    decoding `prompts` (the curve's) `new_tokens` deep; the chain engine's in two blocks, half the
    prompts before everything else and the other half after it (`pass_ms_blocks`).
    `family` (workers/drafters/registry.py) knows how to time a step of `drafter` and how it proposes."""
    device = next(target.parameters()).device
    timing = dict(new_tokens=new_tokens, max_depth=max_depth, warmup=warmup, device=device)
    halves = [prompts[0::2], prompts[1::2]] if len(prompts) >= 2 else [prompts, prompts]
    block_repeats = -(-repeats // len(halves))  # the two blocks together decode each depth `repeats` times
    blocks = [engine_pass_ms(target, family.proposer(drafter), halves[0], **timing, repeats=block_repeats)]
    draft_by_b, verify_by_b, tree_verify, tree_draft = [], [], [], []
    for b in batch_sizes:
        ms = _profile_batch(
            target, drafter, family, b, context_len, max_depth, warmup, repeats, seed, device, tree_budget
        )
        draft_by_b.append(ms.pop("draft_ms"))
        verify_by_b.append(tuple(ms[f"verify_{k}"] for k in range(max_depth + 1)))
        if tree_budget:
            tree_verify.append(
                filled({m: ms[f"tree_verify_{m}"] for m in timed_sizes(max(tree_budget, max_depth) + 1)})
            )
            tree_draft.append(filled({w: ms[f"tree_draft_{w}"] for w in timed_sizes(tree_budget)}))
    one = list(batch_sizes).index(1)
    blocks.append(engine_pass_ms(target, family.proposer(drafter), halves[1], **timing, repeats=block_repeats))
    tree_passes = (
        engine_pass_ms(target, family.proposer(drafter), prompts, **timing, repeats=repeats, trees=True)
        if tree_budget
        else []
    )
    return CostProfile(
        hardware=hardware_of(target),
        draft_ms=draft_by_b[one],
        decode_ms=verify_by_b[one][0],
        verify_ms=verify_by_b[one][-1],
        batch_sizes=tuple(batch_sizes),
        draft_ms_by_batch=tuple(draft_by_b),
        verify_ms_by_batch=tuple(verify_by_b),
        pass_ms=tuple(mean_blocks(blocks)),
        pass_ms_blocks=tuple(tuple(b) for b in blocks),
        tree_verify_ms_by_batch=tuple(tree_verify),
        tree_draft_ms_by_batch=tuple(tree_draft),
        tree_pass_ms=tuple(tree_passes),
        one_pass=family.one_pass,
    )


DENSE = 8  # sizes up to this are all timed; above it, four sizes per doubling


def timed_sizes(largest: int) -> list[int]:
    """The sizes 1..largest that are timed: every size up to DENSE, then 10, 12, 14, 16, 20, 24, 28,
    32, 40, ..., and `largest`. Small passes are where the cost bends (flat while the device is
    idle, then rising); past that it grows smoothly, so a budget of 64 costs 21 timed sizes, not 65."""
    sizes, step = list(range(1, min(largest, DENSE) + 1)), DENSE // 4
    size = DENSE
    while size + step < largest:
        size += step
        sizes.append(size)
        if size & (size - 1) == 0:  # a power of two: the next doubling takes steps twice as long
            step *= 2
    return sizes + [largest] if sizes[-1] != largest else sizes


def filled(times: dict[int, float]) -> tuple[float, ...]:
    """Milliseconds for every size 1..max(times), straight lines between the timed sizes."""
    sizes = sorted(times)
    out = []
    for lo, hi in zip(sizes, sizes[1:]):
        out += [times[lo] + (times[hi] - times[lo]) * (m - lo) / (hi - lo) for m in range(lo, hi)]
    return tuple(out + [times[sizes[-1]]])


def engine_pass_ms(
    target,
    proposer,
    prompts: list[torch.Tensor],
    *,
    new_tokens: int,
    max_depth: int,
    warmup: int,
    repeats: int,
    device,
    trees: bool = False,
) -> list[float]:
    """Milliseconds of one iteration of the real engine at batch size 1, for k = 0..max_depth; with
    `trees`, of the tree engine drafting the chain of k as a tree (workers/decoding/tree_engine.py).

    Timed as validation times the engine (workers/measure/speedup.py), on the curve's own prompts:
    each prompt is decoded `new_tokens` deep (as deep as the curve measured) at every depth, the
    depths rotated from prompt to prompt, until every depth has `repeats` decodes; the figure is the
    median over decodes of a decode's seconds per target pass. Real text matters: the drafter's work
    after a pass grows with what it accepted, and an iteration timed on random text after a long
    context came out 5% or more cheaper, relative to a plain step, than validation then measured
    (chat-8l/eagle3-post of the built-in fleet, 2026-12-06)."""
    from pipeline.core.trees import chain_tree
    from workers.decoding.chain import generate
    from workers.decoding.tree_engine import generate_tree
    from workers.measure.decode_timer import time_decoders

    def at_depth(k: int):
        if trees:
            return lambda prompt, max_new, gen, timing: generate_tree(
                target, proposer, prompt, max_new=max_new, tree=chain_tree(k), temperature=0.0, timing=timing
            )[0]
        return lambda prompt, max_new, gen, timing: generate(
            target, proposer, prompt, max_new=max_new, depth=k, temperature=0.0, timing=timing
        )[0]

    timed = time_decoders(
        [at_depth(k) for k in range(max_depth + 1)],
        prompts,
        device,
        new_tokens=new_tokens,
        repeats=max(1, -(-repeats // len(prompts))),  # passes over the prompts: at least `repeats` decodes
        warmup_prompts=min(warmup, len(prompts)),
        temperature=0.0,
        seed=0,
    )
    return [s * 1000.0 for s in timed["pass_s"]]


def _profile_batch(
    target, drafter, family, batch: int, context_len, max_depth, warmup, repeats, seed, device, tree_budget: int = 0
):
    vocab = target.get_output_embeddings().weight.shape[0]
    gen = torch.Generator().manual_seed(seed)
    ctx = torch.randint(3, vocab, (batch, context_len), generator=gen).to(device)  # [B, L]
    new = torch.randint(3, vocab, (batch, max(max_depth, tree_budget) + 1), generator=gen).to(device)  # [B, k+1]
    _, cache, _ = cached_forward_states(target, ctx, last_only=True)  # the cache is what is timed against

    def target_call(n_tokens: int):
        def run():
            cached_forward_states(target, new[:, :n_tokens], cache)
            cache.crop(-n_tokens)  # drop what the timed call appended (negative: works on old and new transformers)

        return run

    def tree_call(n_tokens: int):
        mask = torch.ones(n_tokens, n_tokens, dtype=torch.bool).tril()  # a chain-shaped tree: what is timed is the size
        positions = torch.arange(context_len, context_len + n_tokens, device=device).expand(batch, -1)

        def run():
            tree_forward_states(target, new[:, :n_tokens], positions, mask, cache)
            cache.crop(-n_tokens)

        return run

    calls = {"draft_ms": family.step_timer(drafter, target, ctx, context_len)}
    calls.update({f"verify_{k}": target_call(k + 1) for k in range(max_depth + 1)})
    if tree_budget:
        calls.update({f"tree_verify_{m}": tree_call(m) for m in timed_sizes(max(tree_budget, max_depth) + 1)})
        calls.update(
            {
                f"tree_draft_{w}": run
                for w, run in family.level_timers(drafter, target, ctx, context_len, timed_sizes(tree_budget)).items()
            }
        )
    return _interleaved_medians(calls, warmup=warmup, repeats=repeats, device=device)
