"""Standalone drafters: an independent small causal LM that shares the target's tokenizer."""
from __future__ import annotations

import torch

from pipeline.core.files import Files
from workers.models import pack_model
from workers.target import build_tiny_llama, train_lm


def train_standalone(*, target, tokenizer, spec, seed: int, device, progress=None) -> tuple[Files, dict]:
    """A tiny Llama trained from scratch on a built-in corpus with the target's tokenizer.

    spec: the drafter's spec entry; its `builtin` section gives the architecture and training."""
    builtin = spec.builtin
    torch.manual_seed(seed)
    model = build_tiny_llama(
        vocab_size=len(tokenizer), hidden_size=builtin.hidden_size, layers=builtin.layers,
        heads=builtin.heads, intermediate_size=builtin.intermediate_size, max_positions=4096,
        tokenizer=tokenizer,
    )
    metrics = train_lm(model, tokenizer, corpus=builtin.train.corpus, train=builtin.train, seed=seed,
                       progress=progress)
    return pack_model(model, tokenizer), metrics
