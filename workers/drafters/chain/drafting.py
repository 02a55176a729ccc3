"""A chain drafter's chains for acceptance measurement: every chain of a text in `depth` passes.

A chain starting at position c drafts `depth` tokens after seq[: c + 2]. A drafter that chains on
its own hidden state (EAGLE-3, an MTP head) drafts every chain in `depth` passes over the whole
sequence (each position is a chain start), and the same passes give the drift diagnostics
(workers/measure/diagnostics.py).
"""

from __future__ import annotations

import torch

from workers.decoding.sampling import sample
from workers.drafters.ranks import ranks_of
from workers.measure.diagnostics import DriftStats
from workers.models.features import target_pass


def fuse_context(drafter, streams) -> torch.Tensor:
    """The drafter's fused input for positions 0..L-2 of the target's captured streams (position i
    is fused with token x_{i+1} to draft x_{i+2})."""
    return drafter.fuse([s[:, :-1].to(drafter.dtype) for s in streams])


@torch.no_grad()
def draft_all_chains(
    drafter, seqs: torch.Tensor, streams, depth: int, temperature: float, gen, starts: list[int], noise=None
):
    """Draft `depth` tokens for the chains starting at `starts`, in `depth` drafter passes.

    seqs: [1, L]; streams: the target's captured states for seqs. Every position drafts (one
    pass serves every chain); only the chains at `starts` are returned: drafts [N, depth],
    their target-vocabulary logits [N, depth, V], the StepOuts (attention kept at the chain
    rows only) and the fused input.
    """
    g0 = fuse_context(drafter, streams)
    c = torch.tensor(starts, device=seqs.device)
    outs = drafter.forward_steps(
        seqs[:, 1:],
        g0,
        depth,
        noise=noise,
        rows=c,
        pick=lambda lg: sample(drafter.full_logits(lg.float()), temperature, gen),
    )
    # step s of the chain that started at c sits at position c + s
    drafts = torch.stack([o.picked[0, c + s] for s, o in enumerate(outs)], dim=1)
    logits = torch.stack([drafter.full_logits(o.logits[0, c + s].float()) for s, o in enumerate(outs)], dim=1)
    return drafts, logits, outs, g0


@torch.no_grad()
def chain_ranks(
    drafter, seqs: torch.Tensor, g0: torch.Tensor, depth: int, starts: list[int], noise=None
) -> torch.Tensor:
    """The rank of the target's own token at every step of the chains at `starts`, the drafter fed the
    target's tokens along the way (where a drafter that guessed right would be). g0: the fused
    input `draft_all_chains` returned for the same text. -> [N, depth]"""
    c = torch.tensor(starts, device=seqs.device)
    forced = torch.zeros_like(seqs[:, 1:])
    forced[:, :-1] = seqs[:, 2:]  # position i is followed by x_{i+2}
    outs = drafter.forward_steps(seqs[:, 1:], g0, depth, noise=noise, rows=c, pick=lambda lg: forced)
    return torch.stack(
        [ranks_of(drafter.full_logits(o.logits[0, c + s].float()), seqs[0, c + 2 + s]) for s, o in enumerate(outs)],
        dim=1,
    )


class HiddenChains:
    """Chains of a drafter that chains on its own hidden state, with the drift diagnostics of the
    same drafting passes."""

    per_depth = False  # a chain of depth k is the first k drafts of the deepest chain

    def __init__(self, drafter, target, depth: int):
        self.drafter, self.target, self.depth = drafter, target, depth
        self.stats = DriftStats(depth)

    def draft(self, seq, starts: list[int], temperature: float, gen, noise):
        streams, _ = target_pass(self.target, seq, self.drafter.cfg.capture_layers)
        drafts, q_logits, outs, g0 = draft_all_chains(
            self.drafter, seq, streams, self.depth, temperature, gen, starts, noise
        )
        self.stats.add(outs, streams, g0, starts)
        self.g0 = g0
        return drafts, q_logits

    def ranks(self, seq, starts: list[int], noise):
        """After `draft` on the same text: the rank of the target's token at every step."""
        return chain_ranks(self.drafter, seq, self.g0, self.depth, starts, noise)

    def diagnostics(self) -> list[tuple[int, str, float]]:
        return self.stats.rows()
