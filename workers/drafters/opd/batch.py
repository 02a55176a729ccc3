"""A batch of rollouts as the replay takes it: the texts side by side, the target's states over them,
and one chain per verification with the target's distribution at its drafted positions.

The target's states come from one pass over each rollout's text (what the drafter read while
decoding, recomputed; a KV-cached decode differs only in rounding). The distributions come from the
final hidden states the verify passes left (workers/decoding/chain.py), through the target's output
head restricted to the drafter's vocabulary: the drafter is scored where it can draft, as imitation
training scores it. The text is padded by the deepest round past its end, so a chain rejected at
the text's last token still has positions for all its steps. A round's rollouts are batched once and
each optimizer step takes some of its rows (`rows_of`): the target runs once per rollout.
"""

from __future__ import annotations

import torch

from workers.drafters.opd.replay import ReplayChain, random_anchor_chains
from workers.drafters.opd.rollout import Rollout
from workers.models.features import HeadRows, target_pass


@torch.no_grad()
def replay_batch(target, rollouts: list[Rollout], capture, vocab: torch.Tensor | None, ablation_gen=None):
    """(ids [B, T], streams, chains) of `rollouts`; vocab: the drafter's draft-vocabulary ids (None: all).
    With `ablation_gen`, the random-anchor ablation's chains (workers/drafters/opd/replay.py)."""
    device = next(target.parameters()).device
    depth = max((len(v.drafts) for r in rollouts for v in r.rounds), default=0)
    lengths = [r.ids.numel() for r in rollouts]
    ids = torch.zeros(len(rollouts), max(lengths) + depth, dtype=torch.long)
    for b, r in enumerate(rollouts):
        ids[b, : lengths[b]] = r.ids
    ids = ids.to(device)
    head = HeadRows(target).select(vocab)
    streams, text_logits = target_pass(target, ids, capture, head if ablation_gen is not None else None)
    chains = [
        ReplayChain(b, v.anchor - 1, tuple(v.drafts), v.accepted, torch.softmax(head(v.final.to(device)), dim=-1))
        for b, r in enumerate(rollouts)
        for v in r.rounds
    ]
    if ablation_gen is not None:
        chains = random_anchor_chains(
            chains, ids, lengths, lambda row, pos: torch.softmax(text_logits[row, pos.to(device)], dim=-1), ablation_gen
        )
    return ids, streams, chains


def rows_of(ids: torch.Tensor, streams, chains: list[ReplayChain], rows: list[int]):
    """The part of a batch (`replay_batch`'s) that holds `rows`, its chains renumbered to match."""
    index = {row: i for i, row in enumerate(rows)}
    take = torch.tensor(rows, device=ids.device)
    return ids[take], [s[take] for s in streams], [ch._replace(row=index[ch.row]) for ch in chains if ch.row in index]
