"""regenerate: the target answers the training questions; its drafters train on that text."""

from __future__ import annotations

from pipeline.core.contracts import Dataset, RegenerateConfig
from workers.data.regenerate import regenerate
from workers.models.loading import load_target
from workers.runtime.device import pick_device, split_gpus


def run(config: RegenerateConfig, inputs: dict, *, num_gpus: float, progress) -> Dataset:
    device = pick_device(num_gpus)
    target, tokenizer = load_target(config.target, inputs.get("target"), device, split_gpus(num_gpus))
    files, metrics = regenerate(target, tokenizer, data=config.data, seed=config.seed, progress=progress)
    return Dataset(metrics=metrics, files=files)
