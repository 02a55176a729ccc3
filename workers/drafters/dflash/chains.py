"""A DFlash drafter's chains for acceptance measurement: every chain of a text in one pass.

A chain starting at position c drafts `depth` tokens after seq[: c + 2]: its block sits at anchor
c + 1 (the token seq[c + 1] known, the context's positions <= c) and positions 1..depth of the
block are its drafts. Every chain of a text is one block of a single `forward_blocks` pass. The
spec keeps the evaluation's depth within the block (block_size - 1 drafts).

A drafter run with `block_drafting: depth` drafts a depth k from a block of k + 1, whose drafts are
not the first k of a deeper block's: it is measured `per_depth`, one pass (and one verification)
per depth, `draft_depth(k)` after `draft` on the same text.
"""

from __future__ import annotations

import torch

from workers.decoding.sampling import sample
from workers.drafters.ranks import ranks_of
from workers.models.features import target_pass


class BlockChains:
    """Chains of a DFlash drafter; no drift diagnostics (it does not chain on its own state)."""

    def __init__(self, drafter, target, depth: int):
        if depth > drafter.drafts_per_block:
            raise ValueError(
                f"a DFlash drafter of block_size {drafter.cfg.block_size} drafts at most "
                f"{drafter.drafts_per_block} tokens, not {depth}"
            )
        self.drafter, self.target, self.depth = drafter, target, depth
        self.per_depth = drafter.block_drafting == "depth"

    @torch.no_grad()
    def draft(self, seq, starts: list[int], temperature: float, gen, noise):
        """Drafts [N, depth] and their logits [N, depth, V] of the chains at `starts`."""
        if noise is not None:
            raise ValueError("a DFlash drafter is not measured under hidden or embedding noise conditions")
        streams, _ = target_pass(self.target, seq, self.drafter.cfg.capture_layers)
        self.ctx, self.seq = self.drafter.context(streams), seq
        self.anchors = torch.tensor(starts, device=seq.device) + 1
        self.logits = self._block(self.depth)
        return sample(self.logits, temperature, gen), self.logits

    @torch.no_grad()
    def draft_depth(self, depth: int, temperature: float, gen):
        """After `draft` on the same text: the chains of a smaller depth as the drafter is run at that
        depth (a block of depth + 1 under `block_drafting: depth`). -> drafts [N, depth], logits [N, depth, V]"""
        logits = self._block(depth)
        return sample(logits, temperature, gen), logits

    def _block(self, depth: int) -> torch.Tensor:
        size = self.drafter.block_for(depth)
        logits = self.drafter.forward_blocks(self.seq[:, self.anchors], self.anchors, self.ctx, size)
        return logits[0, :, 1 : 1 + depth].float()

    def ranks(self, seq, starts: list[int], noise):
        """After `draft` on the same text: the rank of the target's own token at every step."""
        c = torch.tensor(starts, device=seq.device)
        return torch.stack([ranks_of(self.logits[:, s], seq[0, c + 2 + s]) for s in range(self.depth)], dim=1)

    def diagnostics(self) -> list[tuple[int, str, float]]:
        return []
