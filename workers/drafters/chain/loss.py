"""The training loss of a chain drafter: every chain step at once, each against the target.

Loss: sum_s w_s * softCE(target's next-token distribution, drafter step s) over the steps the
recipe unrolls (EAGLE-3's training-time test: w_s = 0.8^s; an MTP head: one step, or 0.6^s
normalised to sum to 1). Step s at position i continues a chain that started s positions earlier,
so only positions i >= s carry a loss at step s.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def chain_loss(drafter, streams, target_logits, input_ids, weights: list[float], mask=None):
    """Weighted loss over len(weights) chain steps and each step's top-1 agreement with the target's argmax.

    input_ids: [B, T]; drafter position i reads x_{i+1} and the target's features at i, and is
    scored against the target's distribution at i+1. target_logits: over the target's vocabulary,
    or already over the drafter's (draft vocabulary ids, in its order: the softmax over them is the
    target's distribution restricted to them). mask: [B, T] bool, the target positions whose
    prediction carries a loss (None: all).
    """
    tokens = input_ids[:, 1:]  # [B, T-1]
    g0 = drafter.fuse([s[:, :-1] for s in streams])  # [B, T-1, d]
    p_target = torch.softmax(target_logits[:, 1:], dim=-1)  # [B, T-1, V or draft_vocab]
    if p_target.shape[-1] != drafter.lm_head.out_features:  # restricted to the draft vocabulary here
        p_target = p_target[..., drafter.draft_ids()]
        p_target = p_target / p_target.sum(-1, keepdim=True).clamp(min=1e-12)
    want = p_target.argmax(-1)
    outs = drafter.forward_steps(tokens, g0, len(weights))
    total, agree = 0.0, []
    for s, (out, weight) in enumerate(zip(outs, weights)):
        logits = out.logits
        logq = F.log_softmax(logits[:, s:].float(), dim=-1)
        ce = -(p_target[:, s:] * logq).sum(-1)  # [B, T-1-s]
        hit = (logits[:, s:].argmax(-1) == want[:, s:]).float()
        total = total + weight * _mean(ce, mask, s)
        agree.append(_mean(hit, mask, s).item())
    return total, agree


def weighted_chain_loss(weights: list[float]):
    """The loss of a recipe with these step weights, as the training loop calls it."""
    return lambda drafter, ids, streams, logits, mask: chain_loss(drafter, streams, logits, ids, weights, mask)


def _mean(values: torch.Tensor, mask: torch.Tensor | None, s: int) -> torch.Tensor:
    """Mean over the positions step s scores; with a mask, over those whose target position is kept."""
    if mask is None:
        return values.mean()
    w = mask[:, 1 + s :].float()
    return (values * w).sum() / w.sum().clamp(min=1.0)
