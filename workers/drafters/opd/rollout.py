"""Rollouts for on-policy distillation (Draft-OPD): real speculative decoding with the current drafter,
every verification kept.

The target verifies every round, so the text keeps the target's distribution while the drafter is
judged on blocks it drafted itself. Each round (`workers.decoding.chain.Verified`) keeps its anchor,
its drafts, how many were accepted and the target's final hidden state at every drafted position,
from which the output head gives the target's distribution there exactly, conditioned on the
drafts before it: past the first rejection, on the drafter's own wrong tokens, which is the signal
the replay trains on (workers/drafters/opd/replay.py). Rollouts run on training prompts only.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from workers.decoding.chain import Verified, generate


class Rollout(NamedTuple):
    ids: torch.Tensor  # [P + G] the prompt and everything decoded after it (the last round's overshoot included)
    prompt_len: int
    rounds: tuple[Verified, ...]  # every verification, in order; round r's anchor indexes `ids`


@torch.no_grad()
def roll_out(
    target,
    proposer,
    prompts: list[torch.Tensor],
    *,
    depth: int,
    max_new: int,
    temperature: float,
    gen: torch.Generator | None = None,
    progress=None,
) -> list[Rollout]:
    """Decode every prompt ([P] ids each) `max_new` tokens deep at `depth`, keeping each round."""
    if depth < 1:
        raise ValueError(f"a rollout drafts: depth must be at least 1, got {depth}")
    device = next(target.parameters()).device
    out = []
    for n, prompt in enumerate(prompts, 1):
        rounds: list[Verified] = []
        tokens, _ = generate(
            target,
            proposer,
            prompt[None].to(device),
            max_new=max_new,
            depth=depth,
            temperature=temperature,
            gen=gen,
            on_round=rounds.append,
        )
        decoded = [tokens[0]] + [t for r in rounds for t in (*r.drafts[: r.accepted], r.emitted)]
        ids = torch.cat([prompt.cpu(), torch.tensor(decoded, dtype=prompt.dtype)])
        out.append(Rollout(ids, prompt.numel(), tuple(_on_cpu(r) for r in rounds)))
        if progress is not None:
            progress(n, len(prompts))
    return out


def _on_cpu(r: Verified) -> Verified:
    return r._replace(final=r.final.float().cpu())
