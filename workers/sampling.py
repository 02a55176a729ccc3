"""Drawing tokens: greedy at temperature 0, from softmax(logits / T) otherwise."""
from __future__ import annotations

import torch


def sample(logits: torch.Tensor, temperature: float, gen: torch.Generator | None) -> torch.Tensor:
    """logits: [..., V] -> token ids [...]."""
    if temperature == 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    flat = probs.reshape(-1, probs.shape[-1])
    draws = torch.multinomial(flat.cpu(), 1, generator=gen).to(probs.device)
    return draws.reshape(probs.shape[:-1])
