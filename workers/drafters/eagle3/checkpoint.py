"""An EAGLE drafter's checkpoint (workers/drafters/chain/checkpoint.py): every trained weight, not
the token embedding, which is the target's, frozen, and is taken from the target when the drafter is
loaded (as serving engines do)."""

from __future__ import annotations

from pathlib import Path

import torch

from workers.drafters.chain.checkpoint import load_drafter, save_drafter
from workers.drafters.eagle3.model import DrafterConfig, Eagle3Drafter

FROZEN = ("embed.weight",)  # the target's, never stored


def save_eagle3(drafter: Eagle3Drafter, dtype: torch.dtype) -> dict[str, bytes]:
    """The checkpoint's files; floating-point weights in `dtype`, the vocabulary maps as they are."""
    return save_drafter(drafter, dtype, FROZEN)


def load_eagle3(folder: str | Path, *, embedding: torch.Tensor | None, device, dtype) -> Eagle3Drafter:
    """Rebuild a drafter from its checkpoint folder; a corrupt or mismatched file is a clear error.

    embedding: the target's input embedding, which the drafter reads its tokens through. None only
    where it is not used (an export writes no embedding): the drafter's stays uninitialised."""
    shared = None if embedding is None else {"embed.weight": embedding}
    return load_drafter(folder, Eagle3Drafter, DrafterConfig, shared=shared, frozen=FROZEN, device=device, dtype=dtype)
