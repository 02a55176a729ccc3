"""Draft-OPD's replay: drafting re-run from the rollouts' verification anchors, trained on what the
target said about each drafted position (Lei et al. 2026, arXiv 2605.29343).

A chain is one verification of a rollout (workers/drafters/opd/rollout.py): its start c (the drafter
position that reads the anchor token, anchor - 1), the k tokens it drafted, how many the target
accepted (n), and p, the target's distribution at each drafted position given the drafts before it.
Replaying it, step s of the chain at position c + s is fed the chain's own draft s - 1 (for s <= n the
text, past the first rejection the drafter's wrong tokens), as decoding fed it. For a drafter whose
steps chain on its own state (EAGLE-3, an MTP head) every chain of a batch replays in one
`forward_steps` unroll (workers/drafters/chain/model.py).

The loss at each step s < k of a chain, with q the drafter's distribution there (softmax over its
vocabulary; p restricted to it and renormalised, as imitation training does):
- the accepted stream, s <= n (the kept drafts and the first rejected one): forward KL(p || q);
- the rejected stream, s >= n when n < k (the first rejected draft and every one after it):
  reverse KL(q || p), weighted by decay^s (the offset from the anchor, the first draft's weight 1);
- both streams pooled into one mean per weighted position:
  (w_a * sum KL_a + w_r * sum decay^s KL_r) / (w_a * N_a + w_r * sum decay^s).
Defaults (decay 0.8, w_a = w_r = 1) are the official code's public recipe. Where it differs: it
scores one token per position (a Bernoulli forward KL on the target's token, a sampled k3 estimate
of the reverse KL on the drafter's), where specfleet has the target's whole distribution from the
verify pass and takes the exact divergences; and it clamps each term at 10, which is not done here.

The random-anchor ablation keeps the rejected stream and moves each chain's accepted stream (its
n + 1 positions, at most k) to a random start in the same rollout's text, teacher-forced there
against the target's distribution over the text: the same amount of on-policy text and loss
positions, without the verification-exposed error positions.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F


class ReplayChain(NamedTuple):
    row: int  # the rollout's row in the batch
    start: int  # c: the drafter position of the chain's first step (its anchor - 1)
    drafts: tuple[int, ...]  # the k tokens its steps drafted, each fed to the next step
    accepted: int  # n: how many of them the target kept (k: all)
    p: torch.Tensor  # [k, draft vocabulary] the target's distribution at each drafted position
    accepted_stream: bool = True  # False: only its rejected stream is trained (the random-anchor ablation)


class ReplayWeights(NamedTuple):
    decay: float = 0.8  # the rejected stream's weight decay^s at step s
    accepted: float = 1.0  # w_a
    rejected: float = 1.0  # w_r


def replay_loss(drafter, ids: torch.Tensor, streams, chains: list[ReplayChain], weights: ReplayWeights):
    """The Draft-OPD loss of `chains` over the rollouts `ids` [B, T] (right-padded), with the target's
    captured `streams` of them. Returns (loss, {"accepted_positions", "rejected_positions", and
    "kl_accepted", "kl_rejected" where that stream has positions}: for logging)."""
    depth = max(len(ch.drafts) for ch in chains)
    tokens = ids[:, 1:]
    forced = fed_tokens(ids, chains, depth)
    fed = iter(forced)
    g0 = drafter.fuse([s[:, :-1].to(drafter.dtype) for s in streams])
    outs = drafter.forward_steps(tokens, g0, depth, pick=lambda logits: next(fed))
    total = tokens.new_zeros((), dtype=torch.float32)
    norm = 0.0
    kl_a, kl_r = [], []
    for ch in chains:
        k = len(ch.drafts)
        positions = torch.arange(k, device=ids.device) + ch.start
        logq = torch.stack(
            [F.log_softmax(outs[s].logits[ch.row, positions[s]].float(), dim=-1) for s in range(k)]
        )  # [k, Vd]
        p = ch.p.to(logq.device)
        logp = torch.log(p.clamp(min=1e-30))
        for s in range(k):
            if ch.accepted_stream and s <= ch.accepted:
                kl = (p[s] * (logp[s] - logq[s])).sum()
                total, norm = total + weights.accepted * kl, norm + weights.accepted
                kl_a.append(kl.detach())
            if s >= ch.accepted:
                w = weights.rejected * weights.decay**s
                kl = (logq[s].exp() * (logq[s] - logp[s])).sum()
                total, norm = total + w * kl, norm + w
                kl_r.append(kl.detach())
    stats = {"accepted_positions": len(kl_a), "rejected_positions": len(kl_r)}
    stats |= {"kl_accepted": float(torch.stack(kl_a).mean())} if kl_a else {}  # a stream with no position has no mean
    stats |= {"kl_rejected": float(torch.stack(kl_r).mean())} if kl_r else {}
    return total / max(norm, 1e-12), stats


def fed_tokens(ids: torch.Tensor, chains: list[ReplayChain], depth: int) -> list[torch.Tensor]:
    """What each drafting step hands the next at every position ([B, T-1] per step): the chain's own
    draft at its positions, the text elsewhere (position i followed by x_{i+2}: teacher forcing). Only
    drafts a later step of the chain reads are written, so a chain sharing a start is fed the same."""
    teacher = torch.zeros_like(ids[:, 1:])
    teacher[:, :-1] = ids[:, 2:]
    forced = [teacher.clone() for _ in range(depth)]
    for ch in chains:
        for s, token in enumerate(ch.drafts[:-1]):  # its last draft is fed to no step of it
            forced[s][ch.row, ch.start + s] = token
    return forced


def random_anchor_chains(
    chains: list[ReplayChain], ids: torch.Tensor, lengths: list[int], text_p, gen: torch.Generator
) -> list[ReplayChain]:
    """The ablation's chains: each chain's rejected stream where it was, its accepted stream (n + 1
    positions, at most k) moved to a random start of its row's decoded text, teacher-forced there
    (never where a kept rejected stream would feed it a wrong draft: a start shared with a chain that
    kept n drafts holds spans of up to n + 1). text_p(row, positions) -> [len, Vd] the target's
    distribution predicting the token after each position. lengths: each row's real length."""
    out = [ch._replace(accepted_stream=False) for ch in chains if ch.accepted < len(ch.drafts)]
    kept_at: dict[tuple[int, int], int] = {}  # (row, start) of a kept rejected stream -> the fewest drafts kept
    for ch in out:
        kept_at[ch.row, ch.start] = min(kept_at.get((ch.row, ch.start), ch.accepted), ch.accepted)
    prompt_end: dict[int, int] = {}  # the first start of each row: where its prompt ends
    for ch in chains:
        prompt_end[ch.row] = min(prompt_end.get(ch.row, ch.start), ch.start)
    for ch in chains:
        span = min(ch.accepted + 1, len(ch.drafts))
        lo, hi = prompt_end[ch.row], lengths[ch.row] - 2 - span  # the chain's drafts stay inside the text
        free = [c for c in range(lo, hi + 1) if kept_at.get((ch.row, c), span) >= span - 1]
        if not free:
            continue
        c = free[int(torch.randint(len(free), (), generator=gen))]
        drafts = tuple(ids[ch.row, c + 2 : c + 2 + span].tolist())
        p = text_p(ch.row, torch.arange(c + 1, c + 1 + span))
        out.append(ReplayChain(ch.row, c, drafts, span, p))
    return out
