"""A chain drafter's checkpoint: config.json and model.safetensors.

It holds what training changed, in the dtype the drafter runs in (bf16 on CUDA): not the weights
the drafter shares with its target (the token embedding; an MTP head's final norm and output head
too), which are frozen and taken from the target when the drafter is loaded, as serving engines
do. For an 8B target the embedding alone is 0.5B of an EAGLE-3 drafter's 0.9B parameters.
"""

from __future__ import annotations

import json
from pathlib import Path

import safetensors
import safetensors.torch
import torch

SHARED_NAMES = {"embed.weight": "embedding", "final_norm.weight": "final norm", "lm_head.weight": "output head"}


def save_drafter(drafter, dtype: torch.dtype, frozen: tuple[str, ...]) -> dict[str, bytes]:
    """The checkpoint's files; floating-point weights in `dtype`, integer buffers as they are, the
    `frozen` (shared with the target) left out."""
    state = {
        k: (v.to(dtype) if v.is_floating_point() else v).detach().to("cpu").contiguous()
        for k, v in drafter.state_dict().items()
        if k not in frozen
    }
    return {
        "config.json": json.dumps(drafter.cfg.to_dict(), indent=1).encode(),
        "model.safetensors": safetensors.torch.save(state),
    }


def load_drafter(
    folder: str | Path, model_cls, config_cls, *, shared: dict | None, frozen: tuple[str, ...], device, dtype
):
    """Rebuild a drafter from its checkpoint folder; a corrupt or mismatched file is a clear error.

    shared: {state-dict name: the target's tensor} for every name in `frozen`. None only where they
    are not used (an export writes none of them): the drafter's stay uninitialised."""
    folder = Path(folder)
    try:
        cfg = config_cls.from_dict(json.loads((folder / "config.json").read_text()))
    except (OSError, ValueError, TypeError) as exc:
        raise RuntimeError(f"drafter checkpoint {folder}: bad config.json ({exc})") from exc
    try:
        state = safetensors.torch.load_file(folder / "model.safetensors")
    except (OSError, safetensors.SafetensorError) as exc:
        raise RuntimeError(f"drafter checkpoint {folder}: cannot read model.safetensors ({exc})") from exc
    drafter = model_cls(cfg)
    own = drafter.state_dict()
    for name, tensor in (shared or {}).items():
        if tuple(tensor.shape) != tuple(own[name].shape):
            raise RuntimeError(
                f"drafter checkpoint {folder}: drafts for a vocabulary of {cfg.vocab_size} x "
                f"{cfg.hidden_size}, the target's {SHARED_NAMES.get(name, name)} is {tuple(tensor.shape)}"
            )
        state.setdefault(name, tensor.detach())
    try:
        # not strict: a checkpoint without the shared weights is expected; what is missing or unexpected
        # is checked just below
        missing, unexpected = drafter.load_state_dict(state, strict=False)
    except RuntimeError as exc:
        raise RuntimeError(
            f"drafter checkpoint {folder}: weights do not match config.json ({str(exc).splitlines()[0]})"
        ) from exc
    missing = [k for k in missing if shared is not None or k not in frozen]
    if missing or unexpected:
        raise RuntimeError(
            f"drafter checkpoint {folder}: weights do not match config.json (missing "
            f"{missing[:3]}, unexpected {unexpected[:3]})"
        )
    return drafter.to(device=device, dtype=dtype).eval()
