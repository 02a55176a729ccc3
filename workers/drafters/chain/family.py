"""The family methods every chain drafter shares: its chains for measurement, its proposer, and the
closures the cost profile times. A family (workers/drafters/<family>/family.py) adds how its
drafters are loaded and exported."""

from __future__ import annotations

import torch

from workers.drafters.chain.drafting import HiddenChains, fuse_context
from workers.drafters.chain.proposer import ChainProposer
from workers.models.features import target_pass


class ChainFamily:
    one_pass = False  # one drafter pass per draft
    drafts_trees = True

    def chains(self, drafter, target, depth: int) -> HiddenChains:
        return HiddenChains(drafter, target, depth)

    def proposer(self, drafter) -> ChainProposer:
        return ChainProposer(drafter)

    def hf_assistant(self, drafter):
        """HF generate cannot draft with a head that reads the target's hidden states: no
        assisted-generation comparison."""
        return None

    def step_timer(self, drafter, target, ctx, context_len: int):
        """A closure running one drafter step against a cached context of context_len tokens."""
        g0 = fuse_context(drafter, batch_streams(target, ctx, drafter.cfg.capture_layers))
        d_cache, logits, chain = drafter.prefill(ctx[:, 1:], g0)  # cached positions 0..L-2
        token = drafter.full_logits(logits).argmax(-1)
        return lambda: drafter.step(token, chain, d_cache, context_len - 1)

    def level_timers(self, drafter, target, ctx, context_len: int, widths) -> dict:
        """{width: a closure running one drafter pass over that many tree nodes per sequence} against
        one cached context (extend leaves the cache as it was)."""
        g0 = fuse_context(drafter, batch_streams(target, ctx, drafter.cfg.capture_layers))
        d_cache, _, chain = drafter.prefill(ctx[:, 1:], g0)

        def timer(width: int):
            tokens = ctx[:, -width:] if width <= ctx.shape[1] else ctx[:, :1].expand(-1, width)
            g = chain[:, None, :].expand(-1, width, -1)
            return lambda: drafter.extend(d_cache, tokens, g, context_len - 1)

        return {w: timer(w) for w in widths}


def batch_streams(target, ctx: torch.Tensor, capture: tuple[int, ...]) -> list[torch.Tensor]:
    """The target's captured states for a timing context [B, L], from one pass over its first row seen B
    times: what a drafter step costs does not depend on the values, and a pass over B x L tokens keeps
    every layer's states (an 8B target at 128 x 2048: 70 GB)."""
    streams, _ = target_pass(target, ctx[:1], capture)
    return [s.expand(ctx.shape[0], -1, -1) for s in streams]
