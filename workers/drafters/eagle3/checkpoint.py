"""An EAGLE drafter's checkpoint: config.json and model.safetensors.

It holds what training changed, in the dtype the drafter runs in (bf16 on CUDA): not the token
embedding, which is the target's, frozen, and is taken from the target when the drafter is
loaded (as serving engines do). For an 8B target that embedding is 0.5B of the drafter's 0.9B
parameters.
"""

from __future__ import annotations

import json
from pathlib import Path

import safetensors
import safetensors.torch
import torch

from workers.drafters.eagle3.model import DrafterConfig, Eagle3Drafter

FROZEN = ("embed.weight",)  # the target's, never stored


def save_eagle3(drafter: Eagle3Drafter, dtype: torch.dtype) -> dict[str, bytes]:
    """The checkpoint's files; floating-point weights in `dtype`, the vocabulary maps as they are."""
    state = {
        k: (v.to(dtype) if v.is_floating_point() else v).detach().to("cpu").contiguous()
        for k, v in drafter.state_dict().items()
        if k not in FROZEN
    }
    return {
        "config.json": json.dumps(drafter.cfg.to_dict(), indent=1).encode(),
        "model.safetensors": safetensors.torch.save(state),
    }


def load_eagle3(folder: str | Path, *, embedding: torch.Tensor | None, device, dtype) -> Eagle3Drafter:
    """Rebuild a drafter from its checkpoint folder; a corrupt or mismatched file is a clear error.

    embedding: the target's input embedding, which the drafter reads its tokens through. None only
    where it is not used (an export writes no embedding): the drafter's stays uninitialised."""
    folder = Path(folder)
    try:
        cfg = DrafterConfig.from_dict(json.loads((folder / "config.json").read_text()))
    except (OSError, ValueError, TypeError) as exc:
        raise RuntimeError(f"drafter checkpoint {folder}: bad config.json ({exc})") from exc
    try:
        state = safetensors.torch.load_file(folder / "model.safetensors")
    except (OSError, safetensors.SafetensorError) as exc:
        raise RuntimeError(f"drafter checkpoint {folder}: cannot read model.safetensors ({exc})") from exc
    drafter = Eagle3Drafter(cfg)
    if embedding is not None:
        if tuple(embedding.shape) != tuple(drafter.embed.weight.shape):
            raise RuntimeError(
                f"drafter checkpoint {folder}: drafts for a vocabulary of {cfg.vocab_size} x "
                f"{cfg.hidden_size}, the target's embedding is {tuple(embedding.shape)}"
            )
        state.setdefault("embed.weight", embedding.detach())
    try:
        # not strict: a checkpoint without the frozen embedding is expected; what is missing or unexpected
        # is checked just below
        missing, unexpected = drafter.load_state_dict(state, strict=False)
    except RuntimeError as exc:
        raise RuntimeError(
            f"drafter checkpoint {folder}: weights do not match config.json ({str(exc).splitlines()[0]})"
        ) from exc
    missing = [k for k in missing if embedding is not None or k not in FROZEN]
    if missing or unexpected:
        raise RuntimeError(
            f"drafter checkpoint {folder}: weights do not match config.json (missing "
            f"{missing[:3]}, unexpected {unexpected[:3]})"
        )
    return drafter.to(device=device, dtype=dtype).eval()
