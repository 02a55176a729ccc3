"""train_drafter: a drafter of the spec's family, trained against its target."""

from __future__ import annotations

from pipeline.core.contracts import TrainDrafterConfig, Trained
from workers.drafters.registry import trainer_of
from workers.models.loading import load_target
from workers.runtime.device import pick_device


def run(config: TrainDrafterConfig, inputs: dict, *, num_gpus: float, progress) -> Trained:
    device = pick_device(num_gpus)
    target, tokenizer = load_target(config.target, inputs.get("target"), device)
    family = config.drafter.kind
    train = trainer_of(family)  # the job's code version covers this trainer's module
    files, metrics = train(
        target=target,
        tokenizer=tokenizer,
        spec=config.drafter,
        seed=config.seed,
        device=device,
        progress=progress,
        data=inputs.get("data"),
        features=inputs.get("features"),
    )
    return Trained(family=family, metrics=metrics, files=files)
