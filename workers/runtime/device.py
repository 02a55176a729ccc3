"""Device and dtype choice on a worker: the GPU Ray assigned, never a silent CPU fallback."""

from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_device(num_gpus: float) -> torch.device:
    """CUDA when the job was given GPUs; raise if it was given GPUs that torch cannot see."""
    if num_gpus > 0:
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"job was scheduled with num_gpus={num_gpus} but torch sees no CUDA device "
                "(CPU-only torch build, or CUDA_VISIBLE_DEVICES is empty)"
            )
        return torch.device("cuda", 0)  # Ray sets CUDA_VISIBLE_DEVICES to the assigned GPUs
    return torch.device("cpu")


def pick_dtype(name: str, device: torch.device) -> torch.dtype:
    """'auto' is bfloat16 on CUDA and float32 on CPU."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return DTYPES[name]


def hardware_id(device: torch.device, dtype: torch.dtype) -> str:
    """A human-readable identity of where timings were taken, e.g. 'NVIDIA H100 x1 bfloat16'."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = f"cpu {torch.get_num_threads()}t"
    return f"{name} x1 {str(dtype).removeprefix('torch.')}"
