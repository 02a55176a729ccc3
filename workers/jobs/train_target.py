"""train_target: a tiny built-in Llama target, trained in-process on a built-in corpus."""

from __future__ import annotations

from pipeline.core.contracts import Trained, TrainTargetConfig
from workers.models.target import train_builtin_target
from workers.runtime.device import pick_device


def run(config: TrainTargetConfig, inputs: dict, *, num_gpus: float, progress) -> Trained:
    pick_device(num_gpus)  # a GPU that was asked for must exist, even if tiny training runs on CPU
    files, metrics = train_builtin_target(builtin=config.builtin, seed=config.seed, progress=progress)
    return Trained(metrics=metrics, files=files)
