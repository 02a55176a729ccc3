"""Built-in targets: tiny Llama-architecture models trained in-process on a built-in corpus.

A trained target is packed as a Hugging Face folder, so it loads like any real model
(workers/models.py).
"""
from __future__ import annotations

import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from pipeline.core.files import Files
from workers.lr_schedule import warmup_cosine_lr
from workers.models import pack_model
from workers.tokenizer import sample_windows, token_stream, train_tokenizer


def build_tiny_llama(*, vocab_size, hidden_size, layers, heads, intermediate_size, max_positions, tokenizer):
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(config)


def train_builtin_target(*, builtin, seed: int, progress=None) -> tuple[Files, dict]:
    """Train tokenizer and model on the built-in corpus; return the packed folder and metrics.

    builtin: the target's `builtin` spec entry (architecture, corpus, `train` section)."""
    torch.manual_seed(seed)
    tokenizer = train_tokenizer(builtin.corpus, builtin.vocab_size)
    model = build_tiny_llama(
        vocab_size=len(tokenizer), hidden_size=builtin.hidden_size, layers=builtin.layers,
        heads=builtin.heads, intermediate_size=builtin.intermediate_size, max_positions=4096,
        tokenizer=tokenizer,
    )
    metrics = train_lm(model, tokenizer, corpus=builtin.corpus, train=builtin.train, seed=seed,
                       progress=progress)
    return pack_model(model, tokenizer), metrics


def train_lm(model, tokenizer, *, corpus: str, train, seed: int, progress=None) -> dict:
    """Next-token training on a built-in corpus (chat samples start every window at their BOS)."""
    chars = max(500_000, train.steps * train.batch_size * train.seq_len * 4)
    stream = token_stream(tokenizer, corpus, "train", max_chars=chars)
    val = token_stream(tokenizer, corpus, "heldout", max_chars=300_000)
    aligned = corpus == "chat"
    opt = torch.optim.AdamW(model.parameters(), lr=train.lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed)
    steps, t0, loss = train.steps, time.perf_counter(), float("nan")
    model.train()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = warmup_cosine_lr(train.lr, step, steps, warmup=20, decay_during_warmup=False)
        batch = sample_windows(stream, train.batch_size, train.seq_len, tokenizer.bos_token_id, gen, aligned)
        loss_t = model(input_ids=batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss_t.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss = loss_t.item()
        if progress is not None:
            progress(step + 1, steps, loss)
    seconds = time.perf_counter() - t0
    model.eval()
    return {
        "train_loss": loss,
        "val_loss": _eval_loss(model, val, train.seq_len, tokenizer.bos_token_id, seed, aligned),
        "train_seconds": seconds,
        "tokens_per_s": steps * train.batch_size * train.seq_len / seconds,
        "num_params": sum(p.numel() for p in model.parameters()),
    }


@torch.no_grad()
def _eval_loss(model, stream: torch.Tensor, seq_len: int, bos_id: int, seed: int, aligned: bool,
               batches: int = 4) -> float:
    gen = torch.Generator().manual_seed(seed + 1)
    losses = [model(input_ids=b, labels=b).loss.item() for b in
              (sample_windows(stream, 16, seq_len, bos_id, gen, aligned) for _ in range(batches))]
    return sum(losses) / len(losses)
