"""Training a drafter that reads the target's hidden states (EAGLE-3, MTP, DFlash) on the frozen
target: where its batches come from and the optimiser loop.

The batches are windows of a built-in corpus with the target run on each, or the target's
regenerated answers and their stored states (`train.corpus: regenerated`). The loop is AdamW with
a warmup-cosine schedule and gradient clipping, over the loss the family gives
(workers/drafters/chain/loss.py for the chain families); it ends with the loss and each step's
top-1 agreement on held-out windows.
"""

from __future__ import annotations

import time

import torch

from workers.data.regenerate import training_text
from workers.data.target_features import FeatureBatches
from workers.data.tokenizer import sample_windows, token_stream
from workers.models.features import HeadRows, target_pass
from workers.runtime.lr_schedule import warmup_cosine_lr
from workers.runtime.replicas import ONE_PROCESS, LossModule, Replicas, Resume


class CorpusBatches:
    """Windows of a built-in corpus, with the target run on each batch for its states and logits."""

    def __init__(self, target, tokenizer, corpus: str, split: str, max_chars: int, capture: tuple[int, ...]):
        self.target, self.capture, self.head = target, capture, HeadRows(target)
        self.stream = _stream(tokenizer, corpus, split, max_chars)
        self.bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else 0
        self.aligned = corpus == "chat"  # chat windows start at a sample's BOS, as the target saw them

    def sample(self, batch_size: int, seq_len: int, gen: torch.Generator, device, vocab=None, part=None):
        """(ids [B, T], streams, target logits [B, T, V or len(vocab)], loss mask or None); vocab: the
        target ids to compute logits for (a drafter's draft vocabulary), all when None. part: the rows
        of the batch to return (one worker's share); the target runs on those only."""
        ids = sample_windows(self.stream, batch_size, seq_len, self.bos, gen, self.aligned)
        ids = (ids if part is None else ids[part]).to(device)
        streams, logits = target_pass(self.target, ids, self.capture, self.head.select(vocab))
        return ids, streams, logits, None


def _stream(tokenizer, corpus: str, split: str, max_chars: int) -> torch.Tensor:
    """Training text in the target's own format: its chat template when it has one."""
    if corpus == "chat":
        from workers.data.chat_format import chat_stream

        return chat_stream(tokenizer, split, max_chars)
    return token_stream(tokenizer, corpus, split, max_chars=max_chars)


def training_sources(target, tokenizer, train, capture, data, features):
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


def optimizer_step(opt, params, loss) -> float:
    """One update on `loss`, its gradients clipped to norm 1 over `params`. Returns the loss."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    return loss.item()


def fit(
    drafter,
    batches,
    val,
    train,
    loss_of,
    *,
    seed: int,
    device,
    progress=None,
    vocab=None,
    replicas: Replicas = ONE_PROCESS,
    resume: Resume | None = None,
    draws: tuple[torch.Generator, ...] = (),
) -> dict:
    """Train `drafter` in place for train.steps steps of `loss_of(drafter, ids, streams, target
    logits, mask) -> (loss, top-1 agreement per step)`. vocab: the target ids whose logits the loss
    needs (a draft vocabulary), all when None. replicas: this process's place in a group of
    workers training it together (workers/runtime/replicas.py); resume: where a group's run reports
    its state and finds the state of a run it continues (every worker calls fit alike); draws: the
    generators the loss draws from besides the batches', saved and restored with that state.
    Returns the metrics: last training loss, held-out loss, each step's held-out top-1 agreement
    (val_top1_step<s>), seconds (and of them, a group's checkpoints'), tokens seen and the step a continued
    run resumed at."""
    work = replicas.working_copy(drafter)  # the drafter itself, or (sharded) a copy the group shards
    model = replicas.wrap(LossModule(work, loss_of))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=train.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    steps, t0, loss_v, first, saving = train.steps, time.perf_counter(), float("nan"), 0, 0.0
    if resume is not None:
        first = resume.restore(model, opt, (gen, *draws))  # the step after the last one reported, 0 for a new run
    model.train()
    for step in range(first, steps):
        lr = warmup_cosine_lr(train.lr, step, steps, warmup=10, decay_during_warmup=True)
        for group in opt.param_groups:
            group["lr"] = lr
        ids, streams, logits, mask = batches.sample(
            train.batch_size, train.seq_len, gen, device, vocab, part=replicas.part
        )
        loss, _ = model(ids, streams, logits, mask)
        loss_v = optimizer_step(opt, params, loss)
        if progress is not None:
            progress(step + 1, steps, loss_v)
        if resume is not None:
            t_save = time.perf_counter()
            resume.report(step + 1, steps, model, opt, (gen, *draws), replicas.rank)
            saving += time.perf_counter() - t_save
    seconds = time.perf_counter() - t0
    replicas.copy_back(model, work, drafter)
    loss_v = replicas.mean(loss_v)
    drafter.eval()
    with torch.no_grad():
        ids, streams, logits, mask = val.sample(16, train.seq_len, gen, device, vocab)
        val_loss, agree = loss_of(drafter, ids, streams, logits, mask)
    metrics = {
        "train_loss": loss_v,
        "val_loss": val_loss.item(),
        "train_seconds": seconds,
        "checkpoint_seconds": saving,  # part of train_seconds: a group reporting its state (0 in one process)
        "tokens_seen": steps * train.batch_size * train.seq_len,
        "resumed_at_step": first,  # 0 for a run from the start; the saved step it continued from otherwise
    }
    metrics.update({f"val_top1_step{s}": a for s, a in enumerate(agree)})
    return metrics
