"""Device and dtype choice on a worker: the GPUs Ray assigned, never a silent CPU fallback.

A job given one GPU (or a share of one) runs on it; a job given N > 1 whole GPUs splits its
target's layers over them (workers/models/split.py) and keeps its inputs, its drafter and
everything else on the first, `pick_device`'s device."""

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
        seen = torch.cuda.device_count()
        if len(split_gpus(num_gpus)) > seen:
            raise RuntimeError(f"job was scheduled with num_gpus={num_gpus:g} but torch sees {seen} CUDA device(s)")
        return torch.device("cuda", 0)  # Ray sets CUDA_VISIBLE_DEVICES to the assigned GPUs
    return torch.device("cpu")


def split_gpus(num_gpus: float) -> tuple[int, ...]:
    """The GPU indices a job's target is split over: all of the job's when it has more than one
    (0..N-1: Ray makes a task's GPUs its only visible ones), none when it runs on one device."""
    return tuple(range(int(num_gpus))) if num_gpus > 1 else ()


def target_gpus(num_gpus: float) -> int:
    """How many GPUs a job's target runs on (1 on one device, or on the CPU): its hardware key's count."""
    return max(1, len(split_gpus(num_gpus)))


def pick_dtype(name: str, device: torch.device) -> torch.dtype:
    """'auto' is bfloat16 on CUDA and float32 on CPU."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return DTYPES[name]


def hardware_id(device: torch.device, dtype: torch.dtype, gpus: int = 1) -> str:
    """A human-readable identity of where timings were taken, e.g. 'NVIDIA H100 x1 bfloat16', or
    'NVIDIA H100 x4 bfloat16' for a target split over four of them (or served over four)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = f"cpu {torch.get_num_threads()}t"
    return f"{name} x{gpus} {str(dtype).removeprefix('torch.')}"


def hardware_of(model) -> str:
    """hardware_id of where `model` runs: its first parameter's device and dtype, and the number of
    GPUs its layers are split over."""
    first = next(model.parameters())
    gpus = len({p.device for p in model.parameters() if p.device.type == "cuda"})
    return hardware_id(first.device, first.dtype, max(1, gpus))
