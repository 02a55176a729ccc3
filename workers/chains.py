"""Drafting many chains at once for acceptance measurement, one way per drafter family.

A chain starting at position c drafts `depth` tokens after seq[: c + 2]. An EAGLE drafter
drafts every chain in `depth` passes over the whole sequence (each position is a chain start);
a standalone draft model drafts each chain from its own KV cache.
"""
from __future__ import annotations

import torch

from workers.features import cached_forward_states
from workers.sampling import sample


def fuse_context(drafter, streams) -> torch.Tensor:
    """The drafter's fused input for positions 0..L-2 of the target's captured streams (position i
    is fused with token x_{i+1} to draft x_{i+2})."""
    return drafter.fuse([s[:, :-1].to(drafter.fc.weight.dtype) for s in streams])


@torch.no_grad()
def draft_all_chains(drafter, seqs: torch.Tensor, streams, depth: int, temperature: float, gen, starts: list[int],
                     noise=None):
    """Draft `depth` tokens for the chains starting at `starts`, in `depth` drafter passes.

    seqs: [1, L]; streams: the target's captured states for seqs. Every position drafts (one
    pass serves every chain); only the chains at `starts` are returned: drafts [N, depth],
    their target-vocabulary logits [N, depth, V], the StepOuts (attention kept at the chain
    rows only) and the fused input.
    """
    g0 = fuse_context(drafter, streams)
    c = torch.tensor(starts, device=seqs.device)
    outs = drafter.forward_steps(seqs[:, 1:], g0, depth, noise=noise, rows=c,
                                 pick=lambda lg: sample(drafter.full_logits(lg.float()), temperature, gen))
    # step s of the chain that started at c sits at position c + s
    drafts = torch.stack([o.picked[0, c + s] for s, o in enumerate(outs)], dim=1)
    logits = torch.stack([drafter.full_logits(o.logits[0, c + s].float()) for s, o in enumerate(outs)], dim=1)
    return drafts, logits, outs, g0


@torch.no_grad()
def draft_chains_with_model(model, seq: torch.Tensor, starts: list[int], depth: int, temperature: float, gen):
    """A standalone draft model drafts each chain from its own KV cache. seq: [1, L].

    starts must increase; the shared cache grows by the real tokens between them. Returns
    drafts [N, depth] and target-vocabulary logits [N, depth, V].
    """
    if any(b <= a for a, b in zip(starts, starts[1:])):
        raise ValueError("chain starts must increase")
    V = model.get_output_embeddings().weight.shape[0]
    drafts = torch.zeros(len(starts), depth, dtype=torch.long, device=seq.device)
    logits = torch.zeros(len(starts), depth, V, device=seq.device)
    out, cache, _ = cached_forward_states(model, seq[:, : starts[0] + 2])
    for n, c in enumerate(starts):  # each chain extends the shared prefix cache, then drafts
        if n > 0:
            out, cache, _ = cached_forward_states(model, seq[:, starts[n - 1] + 2 : c + 2], cache)
        lg, chain_cache = out[:, -1].float(), cache
        for j in range(depth):
            tok = sample(lg, temperature, gen)
            drafts[n, j], logits[n, j] = tok[0], lg[0]
            if j < depth - 1:
                step, chain_cache, _ = cached_forward_states(model, tok[:, None], chain_cache)
                lg = step[:, -1].float()
        if depth > 1:  # the chain's drafts went into the shared cache: drop them before the next real token
            cache.crop(-(depth - 1))
    return drafts, logits


def ranks_of(logits: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """The rank of each true token among the logits (0: the drafter's top guess), ties broken by the
    lower token id first, as the engine orders siblings. logits: [N, V], truth: [N]."""
    mine = logits.gather(-1, truth[:, None])
    ids = torch.arange(logits.shape[-1], device=logits.device)
    return ((logits > mine) | ((logits == mine) & (ids < truth[:, None]))).sum(-1)


@torch.no_grad()
def eagle_ranks(drafter, seqs: torch.Tensor, g0: torch.Tensor, depth: int, starts: list[int],
                noise=None) -> torch.Tensor:
    """The rank of the target's own token at every step of the chains at `starts`, the drafter fed the
    target's tokens along the way (where a drafter that guessed right would be). g0: the fused
    input `draft_all_chains` returned for the same text. -> [N, depth]"""
    c = torch.tensor(starts, device=seqs.device)
    forced = torch.zeros_like(seqs[:, 1:])
    forced[:, :-1] = seqs[:, 2:]  # position i is followed by x_{i+2}
    outs = drafter.forward_steps(seqs[:, 1:], g0, depth, noise=noise, rows=c, pick=lambda lg: forced)
    return torch.stack([ranks_of(drafter.full_logits(o.logits[0, c + s].float()), seqs[0, c + 2 + s])
                        for s, o in enumerate(outs)], dim=1)


@torch.no_grad()
def model_ranks(model, seq: torch.Tensor, depth: int, starts: list[int]) -> torch.Tensor:
    """The same for a standalone draft model: one pass over the target's text. -> [N, depth]"""
    logits = model(input_ids=seq[:, :-1]).logits[0].float()  # position j predicts x_{j+1}
    c = torch.tensor(starts, device=seq.device)
    return torch.stack([ranks_of(logits[c + 1 + s], seq[0, c + 2 + s]) for s in range(depth)], dim=1)
