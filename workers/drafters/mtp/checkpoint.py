"""An MTP head's checkpoint (workers/drafters/chain/checkpoint.py): its norms, projection and decoder
layer; not the embedding, final norm and output head, which are the target's, frozen, and are taken
from the target when the head is loaded."""

from __future__ import annotations

from pathlib import Path

import torch

from workers.drafters.chain.checkpoint import load_drafter, save_drafter
from workers.drafters.mtp.model import MtpConfig, MtpHead, shared_with

FROZEN = ("embed.weight", "final_norm.weight", "lm_head.weight")  # the target's, never stored


def save_mtp(head: MtpHead, dtype: torch.dtype) -> dict[str, bytes]:
    return save_drafter(head, dtype, FROZEN)


def load_mtp(folder: str | Path, *, target, device, dtype) -> MtpHead:
    """Rebuild a head from its checkpoint folder, sharing `target`'s weights; a corrupt or mismatched
    file is a clear error."""
    return load_drafter(
        folder, MtpHead, MtpConfig, shared=shared_with(target), frozen=FROZEN, device=device, dtype=dtype
    )
