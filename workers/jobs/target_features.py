"""target_features: the target's hidden states over its regenerated text, at every layer its drafters read."""

from __future__ import annotations

from pipeline.core.contracts import Dataset, TargetFeaturesConfig
from workers.data.regenerate import load_text
from workers.data.target_features import compute_features
from workers.drafters.target_layers import capture_layers
from workers.models.loading import load_target
from workers.runtime.device import pick_device, split_gpus


def run(config: TargetFeaturesConfig, inputs: dict, *, num_gpus: float, progress) -> Dataset:
    device = pick_device(num_gpus)
    target, _ = load_target(config.target, inputs.get("target"), device, split_gpus(num_gpus))
    n = target.config.num_hidden_layers
    layers = tuple(sorted({i for r in config.rules for i in capture_layers(n, r.fusion, r.capture_layers)}))
    files, metrics = compute_features(target, load_text(inputs["data"]), layers, progress=progress)
    return Dataset(metrics=metrics, files=files)
