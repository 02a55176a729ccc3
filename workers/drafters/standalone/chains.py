"""A standalone draft model's chains for acceptance measurement, each drafted from its own KV cache."""

from __future__ import annotations

import torch

from workers.decoding.sampling import sample
from workers.drafters.ranks import ranks_of
from workers.models.features import cached_forward_states


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


@torch.no_grad()
def model_ranks(model, seq: torch.Tensor, depth: int, starts: list[int]) -> torch.Tensor:
    """The same for a standalone draft model: one pass over the target's text. -> [N, depth]"""
    logits = model(input_ids=seq[:, :-1]).logits[0].float()  # position j predicts x_{j+1}
    c = torch.tensor(starts, device=seq.device)
    return torch.stack([ranks_of(logits[c + 1 + s], seq[0, c + 2 + s]) for s in range(depth)], dim=1)
