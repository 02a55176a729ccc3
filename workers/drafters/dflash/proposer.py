"""A DFlash drafter as the engine's proposer (workers/decoding/chain.py): one block pass drafts up to
block_size - 1 tokens, read as a chain and verified as one; the context cache grows by the target's
states of every committed token."""

from __future__ import annotations

import torch

from workers.decoding.sampling import sample


class BlockProposer:
    """Drafts from one block pass over the cached context (positions < the newest committed token's)."""

    def __init__(self, drafter):
        self.drafter = drafter
        self.capture = drafter.cfg.capture_layers

    def start(self, tokens: list[int], streams) -> None:
        """tokens: committed ids ending with the newest one; streams: target states of all but it."""
        self.cache = self.drafter.extend_context(None, self.drafter.context(streams), 0)
        self.newest, self.anchor = tokens[-1], len(tokens) - 1

    def propose(self, depth: int, temperature: float, gen):
        """The block's positions 1..depth (depth <= block_size - 1), each drawn from its own q (one
        pass: no draft conditions another). The block is the trained one, or depth + 1 long when the
        drafter is run so (`block_drafting: depth`)."""
        size = self.drafter.block_for(depth)
        first = torch.tensor([self.newest], device=self.cache[0][0].device)
        logits = self.drafter.draft_block(self.cache, first, self.anchor, size)[0, 1 : 1 + depth].float()  # [k, V]
        drafts = [int(sample(row, temperature, gen)) for row in logits]
        qs = torch.softmax(logits / temperature, dim=-1) if temperature > 0 else None
        return drafts, qs

    def accept(self, emitted: list[int], streams) -> None:
        """emitted: accepted drafts + the target's token; streams: target states at their inputs (the
        previous newest token and the accepted drafts)."""
        self.cache = self.drafter.extend_context(self.cache, self.drafter.context(streams), self.anchor)
        self.anchor += len(emitted)
        self.newest = emitted[-1]
