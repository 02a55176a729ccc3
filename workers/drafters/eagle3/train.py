"""Training an EAGLE-3-style drafter with training-time test (TTT) on a frozen target.

Loss: sum_s 0.8^s * softCE(target's next-token distribution, drafter step s), s < ttt_depth.
Step s at position i continues a chain that started s positions earlier, so only positions
i >= s carry a loss at step s.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from workers.data.regenerate import training_text
from workers.data.target_features import FeatureBatches
from workers.data.tokenizer import sample_windows, token_stream
from workers.drafters.eagle3.checkpoint import save_eagle3
from workers.drafters.eagle3.model import DrafterConfig, Eagle3Drafter, capture_layers, drafter_from_target
from workers.models.features import HeadRows, target_pass
from workers.models.rope import rope_settings
from workers.runtime.lr_schedule import warmup_cosine_lr

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
    c = target.config
    vocab = target.get_output_embeddings().weight.shape[0]
    layers = capture_layers(c.num_hidden_layers, fusion, capture)
    if draft_vocab is not None and draft_vocab > vocab:
        raise ValueError(f"draft_vocab {draft_vocab} is larger than the target's vocabulary ({vocab})")
    # the attention shape is the target's, as EAGLE-3 builds it: query and key/value heads, head size
    kv_heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    theta, scaling = rope_settings(c)
    return DrafterConfig(
        hidden_size=c.hidden_size,
        heads=c.num_attention_heads,
        intermediate_size=c.intermediate_size,
        vocab_size=vocab,
        capture_layers=layers,
        norm=norm,
        fc_norm=fc_norm,
        attention=attention,
        draft_vocab=draft_vocab,
        rope_theta=theta,
        rope_scaling=scaling,
        rms_eps=float(getattr(c, "rms_norm_eps", 1e-6)),
        kv_heads=kv_heads if kv_heads != c.num_attention_heads else None,
        head_dim=head_dim if head_dim != c.hidden_size // c.num_attention_heads else None,
    )


def ttt_loss(drafter: Eagle3Drafter, streams, target_logits, input_ids, ttt_depth: int, mask=None):
    """Weighted TTT loss and per-step top-1 agreement with the target's argmax.

    input_ids: [B, T]; drafter position i reads x_{i+1} and the target's features at i,
    and is scored against the target's distribution at i+1. target_logits: over the target's
    vocabulary, or already over the drafter's (draft vocabulary ids, in its order: the softmax
    over them is the target's distribution restricted to them). mask: [B, T] bool, the target
    positions whose prediction carries a loss (None: all).
    """
    tokens = input_ids[:, 1:]  # [B, T-1]
    g0 = drafter.fuse([s[:, :-1] for s in streams])  # [B, T-1, d]
    p_target = torch.softmax(target_logits[:, 1:], dim=-1)  # [B, T-1, V or draft_vocab]
    if p_target.shape[-1] != drafter.lm_head.out_features:  # restricted to the draft vocabulary here
        p_target = p_target[..., drafter.draft_ids()]
        p_target = p_target / p_target.sum(-1, keepdim=True).clamp(min=1e-12)
    want = p_target.argmax(-1)
    outs = drafter.forward_steps(tokens, g0, ttt_depth)
    total, agree = 0.0, []
    for s, out in enumerate(outs):
        logits = out.logits
        logq = F.log_softmax(logits[:, s:].float(), dim=-1)
        ce = -(p_target[:, s:] * logq).sum(-1)  # [B, T-1-s]
        hit = (logits[:, s:].argmax(-1) == want[:, s:]).float()
        total = total + (TTT_DECAY**s) * _mean(ce, mask, s)
        agree.append(_mean(hit, mask, s).item())
    return total, agree


def _mean(values: torch.Tensor, mask: torch.Tensor | None, s: int) -> torch.Tensor:
    """Mean over the positions step s scores; with a mask, over those whose target position is kept."""
    if mask is None:
        return values.mean()
    w = mask[:, 1 + s :].float()
    return (values * w).sum() / w.sum().clamp(min=1.0)


class CorpusBatches:
    """Windows of a built-in corpus, with the target run on each batch for its states and logits."""

    def __init__(self, target, tokenizer, corpus: str, split: str, max_chars: int, capture: tuple[int, ...]):
        self.target, self.capture, self.head = target, capture, HeadRows(target)
        self.stream = _stream(tokenizer, corpus, split, max_chars)
        self.bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else 0
        self.aligned = corpus == "chat"  # chat windows start at a sample's BOS, as the target saw them

    def sample(self, batch_size: int, seq_len: int, gen: torch.Generator, device, vocab=None):
        """(ids [B, T], streams, target logits [B, T, V or len(vocab)], loss mask or None); vocab: the
        target ids to compute logits for (a drafter's draft vocabulary), all when None."""
        ids = sample_windows(self.stream, batch_size, seq_len, self.bos, gen, self.aligned).to(device)
        streams, logits = target_pass(self.target, ids, self.capture, self.head.select(vocab))
        return ids, streams, logits, None


def _stream(tokenizer, corpus: str, split: str, max_chars: int) -> torch.Tensor:
    """Training text in the target's own format: its chat template when it has one."""
    if corpus == "chat":
        from workers.data.chat_format import chat_stream

        return chat_stream(tokenizer, split, max_chars)
    return token_stream(tokenizer, corpus, split, max_chars=max_chars)


def most_frequent(stream: torch.Tensor, vocab: int, n: int) -> torch.Tensor:
    """The n most frequent token ids of a stream, sorted by id (the draft vocabulary)."""
    counts = torch.bincount(stream, minlength=vocab)
    return torch.sort(torch.topk(counts, n).indices).values


def _sources(target, tokenizer, train, capture, data, features):
    """(training batches, validation batches, the tokens the draft vocabulary is counted on, the
    number of tokens in the training text)."""
    if train.corpus != "regenerated":
        chars = max(300_000, train.steps * train.batch_size * train.seq_len * 4)
        batches = CorpusBatches(target, tokenizer, train.corpus, "train", chars, capture)
        return (
            batches,
            CorpusBatches(target, tokenizer, train.corpus, "heldout", 200_000, capture),
            batches.stream,
            batches.stream.numel(),
        )
    if data is None or features is None:
        raise ValueError("train.corpus 'regenerated' needs the target's regenerated text and features as inputs")
    text = training_text(data, train.seq_len)
    batches = FeatureBatches(target, text, features, capture)
    return batches, batches.heldout(), text.ids[1:][text.scored[:-1]], text.ids.numel()  # vocabulary: answers


def train_eagle3(*, target, tokenizer, spec, seed: int, device, progress=None, data=None, features=None):
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
    batches, val, stream, data_tokens = _sources(target, tokenizer, train, cfg.capture_layers, data, features)
    draft_ids = most_frequent(stream, cfg.vocab_size, cfg.draft_vocab) if cfg.draft_vocab else None
    drafter = drafter_from_target(target, cfg, draft_ids).to(device)
    vocab = drafter.draft_ids() if cfg.draft_vocab else None  # the target logits the loss needs
    params = [p for p in drafter.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=train.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    steps, t0, loss_v = train.steps, time.perf_counter(), float("nan")
    drafter.train()
    for step in range(steps):
        lr = warmup_cosine_lr(train.lr, step, steps, warmup=10, decay_during_warmup=True)
        for group in opt.param_groups:
            group["lr"] = lr
        ids, streams, logits, mask = batches.sample(train.batch_size, train.seq_len, gen, device, vocab)
        loss, _ = ttt_loss(drafter, streams, logits, ids, train.ttt_depth, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        loss_v = loss.item()
        if progress is not None:
            progress(step + 1, steps, loss_v)
    seconds = time.perf_counter() - t0
    drafter.eval()
    with torch.no_grad():
        ids, streams, logits, mask = val.sample(16, train.seq_len, gen, device, vocab)
        val_loss, agree = ttt_loss(drafter, streams, logits, ids, train.ttt_depth, mask)
    metrics = {
        "train_loss": loss_v,
        "val_loss": val_loss.item(),
        "train_seconds": seconds,
        "data_tokens": data_tokens,
        "tokens_seen": steps * train.batch_size * train.seq_len,
    }
    metrics.update({f"val_top1_step{s}": a for s, a in enumerate(agree)})
    return save_eagle3(drafter, next(target.parameters()).dtype), metrics  # stored in the dtype it runs in
