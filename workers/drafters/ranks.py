"""Where the target's own token ranks among a drafter's guesses: what tree shapes are chosen from."""

from __future__ import annotations

import torch


def ranks_of(logits: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """The rank of each true token among the logits (0: the drafter's top guess), ties broken by the
    lower token id first, as the engine orders siblings. logits: [N, V], truth: [N]."""
    mine = logits.gather(-1, truth[:, None])
    ids = torch.arange(logits.shape[-1], device=logits.device)
    return ((logits > mine) | ((logits == mine) & (ids < truth[:, None]))).sum(-1)
