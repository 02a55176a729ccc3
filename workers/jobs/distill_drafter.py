"""distill_drafter: the stage after an EAGLE-3 drafter's own training (its spec's `distill`), run on its
checkpoint: Draft-OPD, its random-anchor ablation or imitation continued (workers/drafters/opd/stage.py)."""

from __future__ import annotations

import torch

from pipeline.core.artifacts import folder_of
from pipeline.core.contracts import DistillDrafterConfig, Trained
from workers.drafters.eagle3.checkpoint import load_eagle3, save_eagle3
from workers.drafters.opd.stage import distill
from workers.drafters.registry import family_of
from workers.models.loading import load_target
from workers.runtime.device import pick_device, split_gpus


def run(config: DistillDrafterConfig, inputs: dict, *, num_gpus: float, progress) -> Trained:
    device = pick_device(num_gpus)
    target, tokenizer = load_target(config.target, inputs.get("target"), device, split_gpus(num_gpus))
    spec = config.drafter
    trained = inputs.get("drafter")
    if trained is not None:  # trained in float32 whatever the target runs in; the target's embedding read as float32
        embedding = target.get_input_embeddings().weight.detach().float()
        drafter = load_eagle3(folder_of(trained), embedding=embedding, device=device, dtype=torch.float32)
    else:  # the spec's checkpoint from elsewhere (`path`), read as it is
        drafter = family_of(spec.kind).load(spec, None, target).float()
    metrics = distill(
        target=target,
        tokenizer=tokenizer,
        drafter=drafter,
        spec=spec,
        questions=(config.max_prompt_tokens, config.prompts),
        seed=config.seed + spec.distill.seed,
        device=device,
        progress=progress,
        data=inputs.get("data"),
        features=inputs.get("features"),
    )
    return Trained(family=spec.kind, metrics=metrics, files=save_eagle3(drafter, next(target.parameters()).dtype))
