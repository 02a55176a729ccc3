"""Built-in targets: tiny Llama-architecture models trained in-process on a built-in corpus.

A trained target is packed as a Hugging Face folder, so it loads like any real model
(workers/models/loading.py).
"""

from __future__ import annotations

import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from pipeline.core.files import Files
from workers.data.tokenizer import sample_windows, token_stream, train_tokenizer
from workers.models.loading import pack_model
from workers.runtime.lr_schedule import warmup_cosine_lr


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
        vocab_size=len(tokenizer),
        hidden_size=builtin.hidden_size,
        layers=builtin.layers,
        heads=builtin.heads,
        intermediate_size=builtin.intermediate_size,
        max_positions=4096,
        tokenizer=tokenizer,
    )
    sample, data_tokens = corpus_batches(tokenizer, builtin.corpus, builtin.train)
    metrics = train_lm(model, sample, train=builtin.train, seed=seed, data_tokens=data_tokens, progress=progress)
    return pack_model(model, tokenizer), metrics


def corpus_batches(tokenizer, corpus: str, train):
    """Batches of a built-in corpus: (sample(split, batch_size, gen) -> (input ids, labels), tokens
    of the training text). Chat samples start every window at their BOS."""
    chars = max(500_000, train.steps * train.batch_size * train.seq_len * 4)
    streams = {
        "train": token_stream(tokenizer, corpus, "train", max_chars=chars),
        "heldout": token_stream(tokenizer, corpus, "heldout", max_chars=300_000),
    }
    aligned = corpus == "chat"

    def sample(split: str, batch_size: int, gen: torch.Generator):
        batch = sample_windows(streams[split], batch_size, train.seq_len, tokenizer.bos_token_id, gen, aligned)
        return batch, batch

    return sample, streams["train"].numel()


def train_lm(model, sample, *, train, seed: int, data_tokens: int, progress=None) -> dict:
    """Next-token training on `sample`'s batches (corpus_batches, or a regenerated text's)."""
    opt = torch.optim.AdamW(model.parameters(), lr=train.lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed)
    steps, t0, loss = train.steps, time.perf_counter(), float("nan")
    model.train()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = warmup_cosine_lr(train.lr, step, steps, warmup=20, decay_during_warmup=False)
        ids, labels = sample("train", train.batch_size, gen)
        loss_t = model(input_ids=ids, labels=labels).loss
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
        "val_loss": _eval_loss(model, sample, seed),
        "train_seconds": seconds,
        "tokens_per_s": steps * train.batch_size * train.seq_len / seconds,
        "num_params": sum(p.numel() for p in model.parameters()),
        "data_tokens": data_tokens,
        "tokens_seen": steps * train.batch_size * train.seq_len,
    }


@torch.no_grad()
def _eval_loss(model, sample, seed: int, batches: int = 4) -> float:
    gen = torch.Generator().manual_seed(seed + 1)
    losses = []
    for _ in range(batches):
        ids, labels = sample("heldout", 16, gen)
        losses.append(model(input_ids=ids, labels=labels).loss.item())
    return sum(losses) / len(losses)
