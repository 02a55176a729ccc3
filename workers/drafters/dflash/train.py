"""Training a DFlash drafter on a frozen target: blocks at random anchors, each seeing only the
context before its anchor.

Every batch draws `train.anchors` anchor positions a (shared by the batch's rows, from 1 to
T - block_size), and runs every block [x_a, MASK, ...] in one pass (`forward_blocks`). Block
position k >= 1 is scored against the target's distribution of the token at a + k (soft cross
entropy: the target's own prediction, as every specfleet drafter learns), weighted by
exp(-(k - 1) / loss_decay) when the spec sets `loss_decay` (DFlash suggests 7 for blocks of 16,
5 for 10, 4 for 8), uniformly otherwise. The batches and the loop are every drafter's that reads
the target's states (workers/drafters/training.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from workers.drafters.chain.model import shape_of
from workers.drafters.dflash.checkpoint import save_dflash
from workers.drafters.dflash.model import DFlashConfig, DFlashDrafter, drafter_from_target
from workers.drafters.target_layers import spread_layer_ids
from workers.drafters.training import fit, training_sources
from workers.runtime.replicas import ONE_PROCESS, Replicas, Resume


def dflash_config_for(
    target, *, layers: int, block_size: int, mask_token_id: int, target_layer_ids=None
) -> DFlashConfig:
    n = target.config.num_hidden_layers
    ids = tuple(target_layer_ids) if target_layer_ids else spread_layer_ids(n, layers)
    if max(ids) >= n:
        raise ValueError(f"target_layer_ids {list(ids)}: the target has layers 0..{n - 1}")
    return DFlashConfig(
        **shape_of(target),
        target_layer_ids=ids,
        layers=layers,
        block_size=block_size,
        mask_token_id=mask_token_id,
        max_positions=int(getattr(target.config, "max_position_embeddings", None) or 8192),
    )


def rarest_token(stream: torch.Tensor, vocab: int) -> int:
    """The mask token: the rarest token of the training text (the lowest such id), so a block's known
    first token is almost never it."""
    return int(torch.argmin(torch.bincount(stream, minlength=vocab)))


def position_weights(block_size: int, decay: float | None) -> torch.Tensor:
    """The loss weight of block positions 1..block_size-1: exp(-(k - 1) / decay), or 1."""
    k = torch.arange(1, block_size, dtype=torch.float32)
    return torch.exp(-(k - 1) / decay) if decay else torch.ones_like(k)


def random_anchors(length: int, block_size: int, count: int, gen: torch.Generator) -> torch.Tensor:
    """`count` distinct sorted anchors in 1..length - block_size (as many as there are, if fewer)."""
    span = length - block_size
    if span < 1:
        raise ValueError(f"seq_len {length} holds no block of {block_size} after a context")
    pick = torch.randperm(span, generator=gen)[: min(count, span)] + 1
    return torch.sort(pick).values


def block_loss(drafter: DFlashDrafter, ids, streams, target_logits, mask, *, anchors, weights):
    """Weighted soft cross entropy of every block at `anchors` [J] and the top-1 agreement with the
    target's argmax per block position 1..block_size-1.

    ids: [B, T]; streams: the target's captured states over ids; target_logits: [B, T, V] (position
    i: the target's distribution of token i+1); mask: [B, T] bool, the target positions whose
    prediction carries a loss (None: all)."""
    S = drafter.cfg.block_size
    anchors = anchors.to(ids.device)
    logits = drafter.forward_blocks(ids[:, anchors], anchors, drafter.context(streams))  # [B, J, S, V]
    at = anchors[:, None] + torch.arange(1, S, device=ids.device)[None, :]  # [J, S-1] the predicted positions
    p_target = torch.softmax(target_logits[:, at - 1].float(), dim=-1)  # [B, J, S-1, V]
    logq = F.log_softmax(logits[:, :, 1:].float(), dim=-1)
    ce = -(p_target * logq).sum(-1)  # [B, J, S-1]
    keep = mask[:, at - 1].float() if mask is not None else torch.ones_like(ce)
    w = weights.to(ce.device)[None, None, :] * keep
    loss = (ce * w).sum() / w.sum().clamp(min=1e-12)
    hit = (logits[:, :, 1:].argmax(-1) == p_target.argmax(-1)).float()
    agree = [((hit[..., k] * keep[..., k]).sum() / keep[..., k].sum().clamp(min=1.0)).item() for k in range(S - 1)]
    return loss, agree


def train_dflash(
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
    """spec: the drafter's spec entry (layers, block_size, target_layer_ids, loss_decay, `train`);
    data, features: the target's regenerated text and its states, for `train.corpus: regenerated`.
    Returns (files, metrics)."""
    torch.manual_seed(seed)
    ids = tuple(spec.target_layer_ids or spread_layer_ids(target.config.num_hidden_layers, spec.layers))
    train = spec.train
    capture = tuple(i + 1 for i in ids)  # DFlashConfig.capture_layers, before the config (its mask needs the text)
    batches, val, stream, data_tokens = training_sources(target, tokenizer, train, capture, data, features)
    vocab = target.get_output_embeddings().weight.shape[0]
    cfg = dflash_config_for(
        target,
        layers=spec.layers,
        block_size=spec.block_size,
        target_layer_ids=ids,
        mask_token_id=rarest_token(stream, vocab),
    )
    drafter = drafter_from_target(target, cfg).to(device)
    weights = position_weights(cfg.block_size, spec.loss_decay)
    gen = torch.Generator().manual_seed(seed + 1)  # the anchors', apart from the batches' draws

    def loss_of(d, ids, streams, logits, mask):
        anchors = random_anchors(ids.shape[1], cfg.block_size, train.anchors, gen)
        return block_loss(d, ids, streams, logits, mask, anchors=anchors, weights=weights)

    metrics = fit(
        drafter,
        batches,
        val,
        train,
        loss_of,
        seed=seed,
        device=device,
        progress=progress,
        replicas=replicas,
        resume=resume,
        draws=(gen,),
    )
    metrics["data_tokens"] = data_tokens
    return save_dflash(drafter, next(target.parameters()).dtype), metrics
