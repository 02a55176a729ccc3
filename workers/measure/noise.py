"""Perturbing the drafter's inputs with N(0, (a * rms)^2) noise, per position.

`hidden_noise@a` perturbs the hidden path (fused target features and every chain state handed
to the next step); `embedding_noise@a` perturbs the token embeddings. rms is the RMS of the
vector being perturbed, so `a` is a relative noise level.
"""

from __future__ import annotations

import torch


def parse_noise(condition: str):
    """'hidden_noise@0.5' -> ('hidden', 0.5); other conditions -> None."""
    if "_noise@" not in condition:
        return None
    path, level = condition.split("_noise@")
    return path, float(level)


class Noise:
    def __init__(self, path: str, level: float, gen: torch.Generator):
        if path not in ("hidden", "embedding"):
            raise ValueError(f"noise path must be 'hidden' or 'embedding', got {path!r}")
        self.path, self.level, self.gen = path, level, gen

    def _add(self, x: torch.Tensor) -> torch.Tensor:
        rms = x.float().pow(2).mean(-1, keepdim=True).sqrt()  # [..., 1]
        eps = torch.randn(x.shape, generator=self.gen).to(device=x.device, dtype=torch.float32)
        return (x.float() + eps * self.level * rms).to(x.dtype)

    def hidden(self, g: torch.Tensor) -> torch.Tensor:
        return self._add(g) if self.path == "hidden" else g

    def embedding(self, e: torch.Tensor) -> torch.Tensor:
        return self._add(e) if self.path == "embedding" else e
