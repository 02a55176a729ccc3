"""Rotary position embeddings as a target defines them, so a drafter rotates as its target does.

A target's config gives the rotary base (`rope_theta`) and, for long-context models, a
scaling rule (Llama 3.1's `llama3`, or `linear`). `rope_settings` reads both spellings
transformers has used (`rope_theta` + `rope_scaling` in 4.x, one `rope_parameters` dict in 5.x);
`inv_freq` turns them into the per-pair frequencies; `apply_rope` rotates.
"""

from __future__ import annotations

import math

import torch

SCALINGS = ("default", "linear", "llama3")


def rope_settings(config) -> tuple[float, dict | None]:
    """(rope_theta, scaling dict or None for plain RoPE) of a transformers model config."""
    params = getattr(config, "rope_parameters", None)
    params = dict(params) if isinstance(params, dict) else {}
    if any(isinstance(v, dict) for v in params.values()):
        raise ValueError("target: per-layer-type rope_parameters are not supported by the drafter")
    partial = getattr(config, "partial_rotary_factor", None) or params.get("partial_rotary_factor")
    if partial not in (None, 1, 1.0):
        raise ValueError(
            f"target: partial_rotary_factor {partial} is not supported by the drafter (it rotates whole heads)"
        )
    legacy = getattr(config, "rope_scaling", None)
    if isinstance(legacy, dict):
        params = {**legacy, **params}
    theta = float(params.pop("rope_theta", None) or getattr(config, "rope_theta", None) or 10000.0)
    kind = params.get("rope_type") or params.get("type") or "default"
    if kind == "default":
        return theta, None
    if kind not in SCALINGS:
        raise ValueError(f"target: rope_type {kind!r} is not supported by the drafter (known: {', '.join(SCALINGS)})")
    out: dict = {"rope_type": kind}
    for key in ("factor", "low_freq_factor", "high_freq_factor"):
        if key in params:
            out[key] = float(params[key])
    if "original_max_position_embeddings" in params:  # a length: an int, as engines validate it
        out["original_max_position_embeddings"] = int(params["original_max_position_embeddings"])
    return theta, out


def inv_freq(head_dim: int, theta: float, scaling: dict | None = None) -> torch.Tensor:
    """Frequencies of the head_dim/2 rotary pairs, float32 [head_dim / 2]."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    kind = (scaling or {}).get("rope_type", "default")
    if kind == "default":
        return inv
    factor = scaling["factor"]
    if kind == "linear":
        return inv / factor
    if kind == "llama3":  # long wavelengths slowed by `factor`, short ones kept, a smooth ramp between
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        ramp = ((old / wavelen - low) / (high - low)).clamp(0.0, 1.0)
        return (1 - ramp) * inv / factor + ramp * inv
    raise ValueError(f"rope_type {kind!r} is not supported (known: {', '.join(SCALINGS)})")


def apply_rope(x: torch.Tensor, pos: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Rotate x: [B, H, T, dh] at absolute positions pos: [T] (half-split pairing, as Llama)."""
    ang = pos.to(torch.float32)[:, None] * freqs.to(pos.device)[None, :]  # [T, dh/2]
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin
