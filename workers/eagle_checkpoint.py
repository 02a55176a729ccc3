"""An EAGLE drafter's checkpoint: its config.json and model.safetensors, as bytes."""
from __future__ import annotations

import json

import safetensors
import safetensors.torch

from workers.drafter import DrafterConfig, Eagle3Drafter


def save_eagle3(drafter: Eagle3Drafter) -> dict[str, bytes]:
    state = {k: v.detach().to("cpu").contiguous() for k, v in drafter.state_dict().items()}
    return {
        "config.json": json.dumps(drafter.cfg.to_dict(), indent=1).encode(),
        "model.safetensors": safetensors.torch.save(state),
    }


def load_eagle3(files: dict[str, bytes], *, device, dtype) -> Eagle3Drafter:
    """Rebuild a drafter from its checkpoint; a corrupt or mismatched file is a clear error."""
    try:
        cfg = DrafterConfig.from_dict(json.loads(files["config.json"]))
    except (KeyError, ValueError, TypeError) as exc:
        raise RuntimeError(f"drafter checkpoint: bad config.json ({exc})") from exc
    try:
        state = safetensors.torch.load(files["model.safetensors"])
    except (KeyError, safetensors.SafetensorError) as exc:
        raise RuntimeError(f"drafter checkpoint: cannot read model.safetensors ({exc})") from exc
    drafter = Eagle3Drafter(cfg)
    try:
        drafter.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise RuntimeError(f"drafter checkpoint: weights do not match config.json ({str(exc).splitlines()[0]})") from exc
    return drafter.to(device=device, dtype=dtype).eval()
