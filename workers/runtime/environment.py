"""What a worker reports about itself: its device model, CUDA and NVIDIA driver, torch and
transformers releases. Timings are only as good as the match between where they were taken and
where they are used, so the driver asks for this before planning timing jobs, and each timing
job checks it again on the worker it lands on (workers/jobs/run.py)."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from importlib.metadata import version
from pathlib import Path

from pipeline.core.contracts import WorkerEnv


def worker_env(num_gpus: float) -> WorkerEnv:
    """This worker, for a job given `num_gpus` GPUs (CUDA when it has any, as the job will run).
    Library releases are the installed distributions' (no import: a CPU job's report is quick)."""
    if num_gpus > 0:
        import torch

        from workers.runtime.device import pick_device

        device = pick_device(num_gpus)  # refuses GPUs that torch cannot see
        model, cuda, driver = torch.cuda.get_device_name(device), torch.version.cuda or "unknown", _nvidia_driver()
    else:
        model, cuda, driver = _cpu_model(), "none", "none"
    return WorkerEnv(
        device=model, cuda=cuda, driver=driver, torch=version("torch"), transformers=version("transformers")
    )


def gpus_here() -> int:
    """The CUDA devices this process can use."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def differences(planned: WorkerEnv, here: WorkerEnv) -> str:
    """'device NVIDIA H100 -> NVIDIA A100, torch 2.5.1 -> 2.6.0' (empty when they match)."""
    return ", ".join(
        f"{name} {getattr(planned, name)} -> {getattr(here, name)}"
        for name in WorkerEnv.model_fields
        if getattr(planned, name) != getattr(here, name)
    )


def _cpu_model() -> str:
    try:
        found = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
    except OSError:
        found = None
    return f"cpu {found.group(1).strip() if found else platform.processor() or platform.machine()}"


def _nvidia_driver() -> str:
    """The kernel module's release (/proc on Linux), else nvidia-smi's answer, else 'unknown'."""
    try:
        found = re.search(r"Kernel Module\s+([0-9][0-9.]*)", Path("/proc/driver/nvidia/version").read_text())
        if found:
            return found.group(1)
    except OSError:
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        done = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.splitlines()[0].strip()
    return "unknown"
