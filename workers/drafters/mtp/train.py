"""Training an MTP head on a frozen target, by one of two recipes.

- vanilla: chain step 0 only, the head predicting the token after next from the target's own
  last hidden state (one head per extra depth, as DeepSeek-V3 ships them). Run for more steps,
  it chains on its own outputs, which it never saw in training.
- recursive: the same layer unrolled over `train.ttt_depth` steps on its own outputs, step s's
  loss weighted by 0.6^s and the weights normalised to sum to 1 (FastMTP's recipe).

The loss is every chain drafter's (workers/drafters/chain/loss.py), the loop every drafter's that reads
the target's states (workers/drafters/training.py).
"""

from __future__ import annotations

import torch

from workers.drafters.chain.loss import weighted_chain_loss
from workers.drafters.chain.model import shape_of
from workers.drafters.mtp.checkpoint import save_mtp
from workers.drafters.mtp.model import MtpConfig, head_from_target
from workers.drafters.training import fit, training_sources
from workers.runtime.replicas import ONE_PROCESS, Replicas, Resume

RECURSIVE_DECAY = 0.6


def mtp_config_for(target, *, norm: str) -> MtpConfig:
    return MtpConfig(**shape_of(target), num_target_layers=target.config.num_hidden_layers, norm=norm)


def step_weights(recipe: str, steps: int) -> list[float]:
    """The loss weight of each unrolled chain step: [1] for vanilla; 0.6^s normalised for recursive."""
    if recipe == "vanilla":
        return [1.0]
    weights = [RECURSIVE_DECAY**s for s in range(steps)]
    return [w / sum(weights) for w in weights]


def train_mtp(
    *,
    target,
    tokenizer,
    spec,
    seed: int,
    device,
    progress=None,
    data=None,
    features=None,
    replicas: Replicas = ONE_PROCESS,
    resume: Resume | None = None,
):
    """spec: the head's spec entry (recipe, norm, `train` section); data, features: the target's
    regenerated text and its states, for `train.corpus: regenerated`. Returns (files, metrics)."""
    torch.manual_seed(seed)
    cfg = mtp_config_for(target, norm=spec.norm)
    train = spec.train
    batches, val, _, data_tokens = training_sources(target, tokenizer, train, cfg.capture_layers, data, features)
    head = head_from_target(target, cfg).to(device)
    weights = step_weights(spec.recipe, train.ttt_depth)
    loss_of = weighted_chain_loss(weights)
    metrics = fit(
        head,
        batches,
        val,
        train,
        loss_of,
        seed=seed,
        device=device,
        progress=progress,
        replicas=replicas,
        resume=resume,
    )
    metrics["data_tokens"] = data_tokens
    return save_mtp(head, next(target.parameters()).dtype), metrics  # stored in the dtype it runs in
