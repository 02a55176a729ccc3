"""A DFlash drafter's checkpoint (workers/drafters/chain/checkpoint.py): its projection, layers and
norms; not the embedding and output head, which are the target's, frozen, and are taken
from the target when the drafter is loaded."""

from __future__ import annotations

from pathlib import Path

import torch

from workers.drafters.chain.checkpoint import load_drafter, save_drafter
from workers.drafters.dflash.model import DFlashConfig, DFlashDrafter

FROZEN = ("embed.weight", "lm_head.weight")  # the target's, never stored


def save_dflash(drafter: DFlashDrafter, dtype: torch.dtype) -> dict[str, bytes]:
    return save_drafter(drafter, dtype, FROZEN)


def load_dflash(folder: str | Path, *, target, device, dtype) -> DFlashDrafter:
    """Rebuild a drafter from its checkpoint folder, sharing `target`'s embedding and output head (None:
    left uninitialised, for an export that writes neither); a corrupt or mismatched file is a clear error."""
    shared = None
    if target is not None:
        shared = {
            "embed.weight": target.get_input_embeddings().weight,
            "lm_head.weight": target.get_output_embeddings().weight,
        }
    return load_drafter(folder, DFlashDrafter, DFlashConfig, shared=shared, frozen=FROZEN, device=device, dtype=dtype)
