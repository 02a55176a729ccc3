"""Training an EAGLE-3-style drafter with training-time test (TTT) on a frozen target.

Loss: sum_s 0.8^s * softCE(target's next-token distribution, drafter step s), s < ttt_depth
(workers/drafters/chain/loss.py); the batches and the loop are every chain drafter's
(workers/drafters/training.py).
"""

from __future__ import annotations

import torch

from workers.drafters.chain.loss import weighted_chain_loss
from workers.drafters.chain.model import shape_of
from workers.drafters.eagle3.checkpoint import save_eagle3
from workers.drafters.eagle3.model import DrafterConfig, drafter_from_target
from workers.drafters.target_layers import capture_layers
from workers.drafters.training import fit, training_sources
from workers.runtime.replicas import ONE_PROCESS, Replicas, Resume

TTT_DECAY = 0.8


def drafter_config_for(
    target,
    *,
    norm: str,
    fc_norm: bool,
    fusion: str,
    attention: str = "standard",
    draft_vocab: int | None = None,
    capture: list[int] | None = None,
) -> DrafterConfig:
    shape = shape_of(target)  # the attention shape is the target's, as EAGLE-3 builds it
    layers = capture_layers(target.config.num_hidden_layers, fusion, capture)
    if draft_vocab is not None and draft_vocab > shape["vocab_size"]:
        raise ValueError(f"draft_vocab {draft_vocab} is larger than the target's vocabulary ({shape['vocab_size']})")
    return DrafterConfig(
        **shape,
        capture_layers=layers,
        norm=norm,
        fc_norm=fc_norm,
        attention=attention,
        draft_vocab=draft_vocab,
    )


def ttt_weights(ttt_depth: int) -> list[float]:
    """The loss weight of each unrolled chain step: 0.8^s."""
    return [TTT_DECAY**s for s in range(ttt_depth)]


def most_frequent(stream: torch.Tensor, vocab: int, n: int) -> torch.Tensor:
    """The n most frequent token ids of a stream, sorted by id (the draft vocabulary)."""
    counts = torch.bincount(stream, minlength=vocab)
    return torch.sort(torch.topk(counts, n).indices).values


def train_eagle3(
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
    """spec: the drafter's spec entry (its variant switches and `train` section); data, features:
    the target's regenerated text and its states (Dataset results), for `train.corpus: regenerated`.
    Returns (files, metrics)."""
    torch.manual_seed(seed)
    cfg = drafter_config_for(
        target,
        norm=spec.norm,
        fc_norm=spec.fc_norm,
        fusion=spec.fusion,
        attention=spec.attention,
        draft_vocab=spec.draft_vocab,
        capture=spec.capture_layers,
    )
    train = spec.train
    batches, val, stream, data_tokens = training_sources(target, tokenizer, train, cfg.capture_layers, data, features)
    draft_ids = most_frequent(stream, cfg.vocab_size, cfg.draft_vocab) if cfg.draft_vocab else None
    drafter = drafter_from_target(target, cfg, draft_ids).to(device)
    vocab = drafter.draft_ids() if cfg.draft_vocab else None  # the target logits the loss needs
    metrics = fit(
        drafter,
        batches,
        val,
        train,
        weighted_chain_loss(ttt_weights(train.ttt_depth)),
        seed=seed,
        device=device,
        progress=progress,
        vocab=vocab,
        replicas=replicas,
        resume=resume,
    )
    metrics["data_tokens"] = data_tokens
    return save_eagle3(drafter, next(target.parameters()).dtype), metrics  # stored in the dtype it runs in
