"""Standalone drafters: an independent small causal LM that shares the target's tokenizer."""
from __future__ import annotations

import torch

from workers.checkpoint import Files
from workers.target import build_tiny_llama, pack_model, train_lm


def train_standalone(*, tokenizer, builtin: dict, seed: int, progress=None) -> tuple[Files, dict]:
    """A tiny Llama trained from scratch on a built-in corpus with the target's tokenizer."""
    torch.manual_seed(seed)
    model = build_tiny_llama(
        vocab_size=len(tokenizer), hidden_size=builtin["hidden_size"], layers=builtin["layers"],
        heads=builtin["heads"], intermediate_size=builtin["intermediate_size"], max_positions=4096,
        tokenizer=tokenizer,
    )
    metrics = train_lm(model, tokenizer, corpus=builtin["train"]["corpus"], train=builtin["train"], seed=seed,
                       progress=progress)
    return pack_model(model, tokenizer), metrics


def check_vocab(draft_model, target) -> None:
    """A draft model must score the target's token ids: the vocabularies have to match."""
    d = draft_model.get_output_embeddings().weight.shape[0]
    t = target.get_output_embeddings().weight.shape[0]
    if d != t:
        raise ValueError(f"drafter: vocabulary size {d} differs from the target's {t}; "
                         "a standalone drafter must share the target's tokenizer")
