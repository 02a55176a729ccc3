"""Greedy speculative decoding with a chain drafter: draft k -> one verify pass -> accept -> bonus.

At temperature 0 the output must equal the target's own greedy decode token for token; the
tests hold it to that. (The sampled engine with residual resampling comes with the drafter
variants work.)
"""
from __future__ import annotations

import torch

from workers.features import target_pass


@torch.no_grad()
def draft_chain(drafter, seq: torch.Tensor, streams, depth: int) -> list[int]:
    """Greedy chain of `depth` drafts after seq (one sequence, [1, L]), with the drafter KV cache.

    streams: the target's captured states for seq[:, :-1] (positions 0..L-2).
    """
    dtype = drafter.fc.weight.dtype
    g0 = drafter.fuse([s.to(dtype) for s in streams])  # [1, L-1, d]
    cache, logits, chain = drafter.prefill(seq[:, 1:], g0)
    drafts, pos = [], seq.shape[1] - 1
    for _ in range(depth):
        tok = logits.argmax(-1)  # [1]
        drafts.append(int(tok))
        if len(drafts) == depth:
            break
        cache, logits, chain = drafter.step(tok, chain, cache, pos)
        pos += 1
    return drafts


@torch.no_grad()
def speculative_greedy(target, drafter, prompt: torch.Tensor, max_new: int, depth: int):
    """Decode max_new tokens after prompt ([1, P]). Returns (new token ids, accepted counts per pass)."""
    capture = drafter.cfg.capture_layers
    streams, logits = target_pass(target, prompt, capture)
    seq = torch.cat([prompt, logits[:, -1].argmax(-1, keepdim=True)], dim=1)  # first token: the target's
    feats = streams  # target features for positions 0..len(seq)-2
    accepted_counts = []
    while seq.shape[1] - prompt.shape[1] < max_new:
        drafts = draft_chain(drafter, seq, feats, depth)
        cand = torch.cat([seq, torch.tensor([drafts], device=seq.device)], dim=1)
        streams, logits = target_pass(target, cand, capture)  # the ONE verify pass
        want = logits[0, seq.shape[1] - 1 :].argmax(-1).tolist()  # target's choice after each prefix
        n = 0
        while n < depth and drafts[n] == want[n]:
            n += 1
        accepted_counts.append(n)
        seq = torch.cat([seq, torch.tensor([drafts[:n] + [want[n]]], device=seq.device)], dim=1)
        feats = [s[:, : seq.shape[1] - 1] for s in streams]
    return seq[0, prompt.shape[1] : prompt.shape[1] + max_new].tolist(), accepted_counts


@torch.no_grad()
def target_greedy(target, prompt: torch.Tensor, max_new: int) -> list[int]:
    """The target's own greedy decode (the reference speculative decoding must reproduce)."""
    seq = prompt
    for _ in range(max_new):
        nxt = target(input_ids=seq, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
    return seq[0, prompt.shape[1] :].tolist()
