"""train_drafter: a drafter of the spec's family, trained against its target, in the job's own
process or (the spec's resources.train_drafter.workers > 1) on a group of Ray Train workers."""

from __future__ import annotations

import hashlib
import json

from pipeline.core.contracts import TrainDrafterConfig, Trained
from workers.drafters.registry import trainer_of
from workers.models.loading import load_target
from workers.runtime.device import pick_device, split_gpus
from workers.runtime.ray_train import train_in_group
from workers.runtime.replicas import ONE_PROCESS, Replicas, Resume


def run(config: TrainDrafterConfig, inputs: dict, *, num_gpus: float, progress) -> Trained:
    if config.group is not None:
        files, metrics = train_in_group(config, inputs, run_name=_run_name(config, inputs), progress=progress)
    else:
        files, metrics = train_here(config, inputs, num_gpus=num_gpus, progress=progress)
    return Trained(family=config.drafter.kind, metrics=metrics, files=files)


def _run_name(config: TrainDrafterConfig, inputs: dict) -> str:
    """The group's Ray Train run: the same for a retry of the same job, so the retry continues it."""
    blob = json.dumps(
        [config.model_dump(mode="json"), {k: v.model_dump(mode="json") for k, v in sorted(inputs.items())}],
        sort_keys=True,
    )
    return "train-" + hashlib.sha256(blob.encode()).hexdigest()[:24]


def train_here(
    config: TrainDrafterConfig,
    inputs: dict,
    *,
    num_gpus: float,
    progress,
    replicas: Replicas = ONE_PROCESS,
    resume: Resume | None = None,
    devices: tuple | None = None,
):
    """The training in this process, alone or as one worker of a group. -> (files, metrics)
    devices: the torch devices this process trains on, where they are not the first `num_gpus`
    visible ones (a group's worker: Ray Train lets the workers of a node see each other's GPUs)."""
    if devices is None:
        device, split = pick_device(num_gpus), split_gpus(num_gpus)
    else:
        device, split = devices[0], tuple(d.index for d in devices) if len(devices) > 1 else ()
    target, tokenizer = load_target(config.target, inputs.get("target"), device, split)
    train = trainer_of(config.drafter.kind)  # the job's code version covers this trainer's module
    return train(
        target=target,
        tokenizer=tokenizer,
        spec=config.drafter,
        seed=config.seed,
        device=device,
        progress=progress,
        data=inputs.get("data"),
        features=inputs.get("features"),
        replicas=replicas,
        resume=resume,
    )
