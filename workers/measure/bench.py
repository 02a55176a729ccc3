"""The measurements of `specfleet bench` that need torch, on one trained pairing in this process.

- curve cost: specfleet's acceptance curve (one max-depth chain per position, every k <= K read from
  it) against a per-depth sweep (the speculative engine run once per k = 1..K over the same
  positions) and against the lower bound (one target pass and K drafter steps per position);
- training speed: drafter training tokens/s per TTT depth, with the share of time spent in the
  target's forward pass, on a built-in corpus (the target runs on every batch) and on cached states.

Target passes are counted, and timed, by hooks on the target module: every pass of specfleet's
engine, curve and trainer goes through it, whatever the entry point.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch

from workers.data.prompts import build_prompts
from workers.decoding.chain import clock, generate
from workers.measure.curves import measure_curves
from workers.measure.decode_timer import time_decoders


@contextmanager
def target_passes(target):
    """Counts the target's forward passes and the tokens they ran, and their wall time, while open."""
    device = next(target.parameters()).device
    stats = {"passes": 0, "tokens": 0, "seconds": 0.0}
    started: list[float] = []

    def before(module, args, kwargs):
        started.append(clock(device))

    def after(module, args, kwargs, output):
        ids = kwargs.get("input_ids", args[0] if args else None)
        stats["passes"] += 1
        stats["tokens"] += int(ids.numel()) if ids is not None else 0
        stats["seconds"] += clock(device) - started.pop()

    hooks = [
        target.register_forward_pre_hook(before, with_kwargs=True),
        target.register_forward_hook(after, with_kwargs=True),
    ]
    try:
        yield stats
    finally:
        for hook in hooks:
            hook.remove()


def curve_cost(*, target, drafter, family, tokenizer, evaluation, pass_ms, seed: int) -> dict:
    """The three ways to know accept_len(k) for every k <= K on the same positions (the evaluation's
    first condition, temperature 0, no rank paths). `pass_ms[k]`: one engine iteration at depth k,
    from the pairing's cost profile. The sweep also times plain decoding (k = 0): with it, it is the
    brute-force way to choose k (the engine at every depth), so its tokens/s per k come back too."""
    ev = evaluation.model_copy(update={"conditions": evaluation.conditions[:1], "temperatures": [0.0], "tree_topk": 0})
    depth, positions = ev.max_depth, ev.num_prompts * ev.continuation_len
    with target_passes(target) as counted, torch.no_grad():
        t0 = time.perf_counter()
        ((curve, *_),) = measure_curves(
            target=target, drafter=drafter, family=family, tokenizer=tokenizer, evaluation=ev, seed=seed
        )
        curve_s = time.perf_counter() - t0
    out = {
        "positions": positions,
        "max_depth": depth,
        "curve": {
            "seconds": curve_s,
            "target_passes": counted["passes"],
            "target_tokens": counted["tokens"],
            "accept_len": list(curve.accept_len),
        },
    }
    prompts = build_prompts(
        tokenizer,
        corpus=ev.corpus,
        condition=ev.conditions[0],
        num_prompts=ev.num_prompts,
        prompt_len=ev.prompt_len,
        long_context_len=ev.long_context_len,
        seed=seed,
        answer_prefix=ev.answer_prefix,
        prompts_file=ev.prompts,
    )
    proposer = family.proposer(drafter)
    passes, wall = [0] * (depth + 1), [0.0] * (depth + 1)

    def at_depth(k):
        def decode(prompt, max_new, gen, timing):
            t0 = time.perf_counter()  # the whole decode, the prompt's pass included, as the curve is timed
            with target_passes(target) as mine:
                tokens = generate(
                    target, proposer, prompt, max_new=max_new, depth=k, temperature=0.0, gen=gen, timing=timing
                )[0]
            passes[k] += mine["passes"]
            wall[k] += time.perf_counter() - t0
            return tokens

        return decode

    with torch.no_grad():
        t0 = time.perf_counter()
        timed = time_decoders(
            [at_depth(k) for k in range(depth + 1)],
            prompts,
            next(target.parameters()).device,
            new_tokens=ev.continuation_len,
            repeats=1,
            warmup_prompts=0,
            temperature=0.0,
            seed=seed,
        )
        sweep_s = time.perf_counter() - t0
    # seconds: wall time of the decodes at k = 1..K, prompts' passes included (the curve's seconds are too)
    out["sweep"] = {
        "seconds_by_depth": wall,
        "target_passes_by_depth": passes,
        "accept_len": timed["accept_len"],
        "tokens_per_s": timed["tokens_per_s"],
        "seconds": sum(wall[1:]),
        "target_passes": sum(passes[1:]),
        "seconds_all_depths": sweep_s,
        "greedy_mismatches": timed["greedy_mismatches"],
    }
    # one depth-K engine iteration (K drafter steps and one target pass) per position, at batch size 1,
    # as the cost profile timed it: the fewest passes any per-position method needs
    out["lower_bound"] = {"target_passes": positions, "seconds": positions * pass_ms[depth] / 1000.0}
    return out


def training_speed(*, target, tokenizer, spec, data, features, ttt_depths, steps: int, seed: int, device) -> list[dict]:
    """Drafter training at every TTT depth, on a built-in corpus (spec.train.corpus unless regenerated:
    then chat) and on the cached states of `features` (the target's regenerated text `data`): tokens/s
    over the training loop, and the share of it spent in the target's forward pass."""
    from workers.drafters.eagle3.train import train_eagle3

    corpus = spec.train.corpus if spec.train.corpus != "regenerated" else "chat"
    rows = []
    for ttt in ttt_depths:
        for source in (corpus, "regenerated"):
            train = spec.train.model_copy(update={"ttt_depth": ttt, "steps": steps, "corpus": source})
            at_end: dict = {}
            with target_passes(target) as counted:

                def progress(step, total, loss, counted=counted, at_end=at_end):
                    if step == total:  # the loop's last step: validation passes after it are not training
                        at_end.update(counted)

                _, metrics = train_eagle3(
                    target=target,
                    tokenizer=tokenizer,
                    spec=spec.model_copy(update={"train": train}),
                    seed=seed,
                    device=device,
                    progress=progress,
                    data=data,
                    features=features,
                )
            seconds = metrics["train_seconds"]
            rows.append(
                {
                    "ttt_depth": ttt,
                    "features": "cached" if source == "regenerated" else f"target pass ({source})",
                    "tokens_per_s": metrics["tokens_seen"] / seconds,
                    "seconds": seconds,
                    "target_forward_share": at_end.get("seconds", 0.0) / seconds,
                    "target_passes": at_end.get("passes", 0),
                }
            )
    return rows
