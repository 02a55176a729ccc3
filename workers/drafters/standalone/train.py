"""Standalone drafters: an independent small causal LM that shares the target's tokenizer."""

from __future__ import annotations

import torch

from pipeline.core.files import Files
from workers.data.regenerate import training_text
from workers.models.loading import pack_model
from workers.models.target import build_tiny_llama, corpus_batches, train_lm
from workers.runtime.replicas import ONE_PROCESS, Replicas


def train_standalone(
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
    resume=None,
) -> tuple[Files, dict]:
    """A tiny Llama trained from scratch with the target's tokenizer, on a built-in corpus or, with
    `train.corpus: regenerated`, on the target's own answers (`data`: sequence-level distillation).

    spec: the drafter's spec entry; its `builtin` section gives the architecture and training.
    features: unused (a draft model reads no target states). It trains in one process (the spec
    refuses a group for it): replicas and resume are those of one process."""
    if replicas.world != 1 or resume is not None:
        raise ValueError("a standalone draft model trains in one process, not on a group of workers")
    builtin = spec.builtin
    torch.manual_seed(seed)
    model = build_tiny_llama(
        vocab_size=len(tokenizer),
        hidden_size=builtin.hidden_size,
        layers=builtin.layers,
        heads=builtin.heads,
        intermediate_size=builtin.intermediate_size,
        max_positions=4096,
        tokenizer=tokenizer,
    )
    train = builtin.train
    if train.corpus == "regenerated":
        text = training_text(data, train.seq_len)
        sample, data_tokens = (lambda split, n, gen: text.lm_batch(split, n, train.seq_len, gen)), text.ids.numel()
    else:
        sample, data_tokens = corpus_batches(tokenizer, train.corpus, train)
    metrics = train_lm(model, sample, train=train, seed=seed, data_tokens=data_tokens, progress=progress)
    return pack_model(model.to(next(target.parameters()).dtype), tokenizer), metrics  # in the dtype it runs in
