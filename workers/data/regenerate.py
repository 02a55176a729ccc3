"""Drafter training text the target writes itself: its answers to the training questions.

A drafter learns to predict what its target will say, so it should train on text the target
says (EAGLE-3 and SpecForge regenerate the assistant turns of their chat data with the target).
Each question (a built-in chat question of the train split, or a prompts file's conversation up
to its last user turn) is rendered with the target's chat template up to the assistant turn, then
the target answers it, `batch_size` prompts at a time (left-padded), until the text holds
`tokens` tokens. A prompts file whose assistant turns are already this target's answers can be
taken as written instead (`training_data.answers: as_written`): then nothing is generated.

The result is one flat token stream of samples [BOS] + prompt + answer, with `scored` marking
the positions whose next token is part of an answer: drafters are trained on those only.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import safetensors.torch
import torch

from pipeline.core.artifacts import folder_of
from workers.data.chat_format import assistant_spans, turns_ids
from workers.data.prompts import conversation_pool, pick, read_prompts_file
from workers.data.tokenizer import pad_id

FILE = "tokens.safetensors"
HELDOUT_SHARE = 0.05  # the last 5% of the samples are held out for validation


def question_prompts(tokenizer, max_prompt_tokens: int, seed: int, prompts_file=None) -> list[list[int]]:
    """The questions as prompts ([BOS] + template up to the answer), shuffled: the built-in chat
    corpus's train split, or a prompts file's conversations up to their last user turn."""
    pool = conversation_pool(prompts_file, "train")
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    out = []
    for i in pick(len(pool), len(pool), seed):
        turns, _ = pool[i].prompt_turns()
        ids = bos + turns_ids(tokenizer, turns, template=True, generation_prompt=True)
        if len(ids) <= max_prompt_tokens:
            out.append(ids)
    return out


def written_answers(tokenizer, *, data, seed: int, progress=None) -> tuple[dict[str, bytes], dict]:
    """A prompts file's conversations as they are (`answers: as_written`): [BOS] + every turn, the
    assistant turns scored. Conversations longer than max_prompt_tokens + max_new_tokens, or whose
    first assistant turn starts after max_prompt_tokens, are skipped."""
    pool = read_prompts_file(data.prompts)
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    longest = data.max_prompt_tokens + data.max_new_tokens
    text = _TextBuilder()
    skipped = unanswered = 0
    for n, i in enumerate(pick(len(pool), len(pool), seed), 1):
        ids, spans = assistant_spans(tokenizer, pool[i].messages)
        if not spans:
            unanswered += 1
            continue
        if len(bos) + len(ids) > longest or len(bos) + spans[0][0] > data.max_prompt_tokens:
            skipped += 1
            continue
        text.add(bos + ids, [(a + len(bos), b + len(bos)) for a, b in spans])
        if progress is not None and (n % 64 == 0 or n == len(pool)):
            progress(min(text.size, data.tokens), data.tokens, float("nan"))
        if text.size >= data.tokens:
            break
    if not text.starts:
        raise ValueError(
            f"training_data.prompts: no conversation of {data.prompts.path} has an assistant turn and "
            f"fits in max_prompt_tokens + max_new_tokens = {longest} tokens"
        )
    return text.files(), {**text.metrics(), "skipped_too_long": skipped, "skipped_unanswered": unanswered}


class _TextBuilder:
    """Samples back to back, with `scored` marking the positions whose next token is an answer's."""

    def __init__(self):
        self.ids: list[int] = []
        self.scored: list[bool] = []
        self.starts: list[int] = []
        self.answer_tokens = 0

    @property
    def size(self) -> int:
        return len(self.ids)

    def add(self, ids: list[int], answers: list[tuple[int, int]]) -> None:
        """One sample; answers: the [start, end) token ranges of its answers within `ids`."""
        scored = [False] * len(ids)
        for a, b in answers:
            for t in range(max(a - 1, 0), b - 1):  # position t is scored when token t + 1 is an answer's
                scored[t] = True
            self.answer_tokens += b - a
        self.starts.append(len(self.ids))
        self.ids += ids
        self.scored += scored

    def files(self) -> dict[str, bytes]:
        tensors = {
            "ids": torch.tensor(self.ids, dtype=torch.int64),
            "scored": torch.tensor(self.scored, dtype=torch.bool),
            "starts": torch.tensor(self.starts, dtype=torch.int64),
        }
        return {FILE: safetensors.torch.save(tensors)}

    def metrics(self) -> dict:
        n = len(self.starts)
        return {
            "samples": n,
            "tokens": len(self.ids),
            "answer_tokens": self.answer_tokens,
            "mean_answer_len": self.answer_tokens / n,
        }


@torch.no_grad()
def answer_batch(
    target,
    prompts: list[list[int]],
    *,
    max_new: int,
    temperature: float,
    eos: int | None,
    pad: int,
    gen: torch.Generator | None,
) -> list[list[int]]:
    """The target's answers to a batch of prompts (each up to and including EOS, or max_new long)."""
    device = next(target.parameters()).device
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, p in enumerate(prompts):
        ids[r, width - len(p) :], mask[r, width - len(p) :] = torch.tensor(p), 1
    sampling = (
        {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
        if temperature > 0
        else {"do_sample": False}
    )
    if gen is not None:  # generate() draws from torch's global generator: seed it from ours
        torch.manual_seed(int(torch.randint(2**31, (), generator=gen)))
    out = target.generate(
        input_ids=ids.to(device),
        attention_mask=mask.to(device),
        max_new_tokens=max_new,
        eos_token_id=eos,
        pad_token_id=pad,
        **sampling,
    )
    answers = []
    for row in out[:, width:].tolist():
        if eos is not None and eos in row:
            row = row[: row.index(eos) + 1]
        answers.append(row)
    return answers


def regenerate(target, tokenizer, *, data, seed: int, progress=None) -> tuple[dict[str, bytes], dict]:
    """data: the spec's `training_data` section. Returns ({FILE: bytes}, metrics)."""
    if data.answers == "as_written":
        return written_answers(tokenizer, data=data, seed=seed, progress=progress)
    prompts = question_prompts(tokenizer, data.max_prompt_tokens, seed, data.prompts)
    if not prompts:
        raise ValueError(f"training_data: no training question fits in max_prompt_tokens={data.max_prompt_tokens}")
    eos = tokenizer.eos_token_id
    pad = pad_id(tokenizer)
    gen = torch.Generator().manual_seed(seed) if data.temperature > 0 else None
    text = _TextBuilder()
    t0 = time.perf_counter()
    for lo in range(0, len(prompts), data.batch_size):
        batch = prompts[lo : lo + data.batch_size]
        for prompt, answer in zip(
            batch,
            answer_batch(
                target, batch, max_new=data.max_new_tokens, temperature=data.temperature, eos=eos, pad=pad, gen=gen
            ),
        ):
            text.add(prompt + answer, [(len(prompt), len(prompt) + len(answer))])
        if progress is not None:
            progress(min(text.size, data.tokens), data.tokens, float("nan"))
        if text.size >= data.tokens:
            break
    seconds = time.perf_counter() - t0
    return text.files(), {
        **text.metrics(),
        "generate_seconds": seconds,
        "answer_tokens_per_s": text.answer_tokens / seconds,
    }


class Text(NamedTuple):
    ids: torch.Tensor  # [N] token ids, samples back to back
    scored: torch.Tensor  # [N] bool: the next token belongs to an answer
    starts: torch.Tensor  # [S] where each sample starts

    def bounds(self) -> list[tuple[int, int]]:
        """[start, end) of every sample."""
        s = self.starts.tolist()
        return list(zip(s, s[1:] + [self.ids.numel()]))

    def split_bounds(self, split: str) -> tuple[int, int]:
        """[lo, hi) of the text a split draws windows from: the last HELDOUT_SHARE of the samples
        (at least one) are held out, as one block, so no window of one split reads the other's."""
        n = self.starts.numel()
        held = max(1, round(n * HELDOUT_SHARE))
        if held >= n:
            raise ValueError(
                f"regenerated text: {n} sample(s) cannot be split into training and held-out "
                "samples; raise training_data.tokens"
            )
        cut = int(self.starts[n - held])
        return (0, cut) if split == "train" else (cut, self.ids.numel())

    def sample_rows(self, split: str, batch_size: int, seq_len: int, gen: torch.Generator) -> torch.Tensor:
        """Positions [B, T] of random windows of `split` ("train" or "heldout") that start where a
        sample starts, as the target saw its text."""
        lo, hi = self.split_bounds(split)
        starts = self.starts[(self.starts >= lo) & (self.starts + seq_len <= hi)]
        if starts.numel() == 0:
            raise ValueError(
                f"regenerated text: no {split} sample starts a window of {seq_len} tokens "
                f"(the {split} text holds {hi - lo} tokens); lower seq_len or raise training_data.tokens"
            )
        picked = starts[torch.randint(0, starts.numel(), (batch_size,), generator=gen)]
        return picked[:, None] + torch.arange(seq_len)[None, :]

    def check_windows(self, seq_len: int) -> None:
        """Raise now, before any training, if either split cannot give a window of seq_len."""
        for split in ("train", "heldout"):
            self.sample_rows(split, 1, seq_len, torch.Generator().manual_seed(0))

    def scored_rows(self, split: str, batch_size: int, seq_len: int, gen: torch.Generator, tries: int = 50):
        """sample_rows, drawn again while the windows hold no scored position (a loss over nothing)."""
        for _ in range(tries):
            rows = self.sample_rows(split, batch_size, seq_len, gen)
            if self.scored[rows][:, :-1].any():
                return rows
        raise ValueError(
            f"regenerated text: {tries} batches of {split} windows of {seq_len} tokens held no answer "
            "token (the prompts fill the windows, or the answers are empty); raise train.seq_len"
        )

    def lm_batch(self, split: str, batch_size: int, seq_len: int, gen: torch.Generator):
        """(input ids, labels) for next-token training on the answers only (-100 elsewhere)."""
        rows = self.scored_rows(split, batch_size, seq_len, gen)
        ids = self.ids[rows]
        labels = ids.clone()
        labels[:, 0] = -100
        labels[:, 1:][~self.scored[rows][:, :-1]] = -100  # label t is kept when position t-1 is scored
        return ids, labels


def load_text(data) -> Text:
    """A regenerated text from its job's result (a Dataset); a corrupt file is a clear error."""
    try:
        t = safetensors.torch.load_file(folder_of(data) / FILE)
        return Text(t["ids"], t["scored"], t["starts"])
    except (OSError, KeyError, safetensors.SafetensorError) as exc:
        raise RuntimeError(f"regenerated text: cannot read {FILE} ({exc})") from exc


def training_text(data, seq_len: int) -> Text:
    """A drafter's regenerated training text (its `data` input), checked before any training step:
    missing, corrupt, or too small for windows of seq_len in either split is an error now."""
    if data is None:
        raise ValueError("train.corpus 'regenerated' needs the target's regenerated text as an input")
    text = load_text(data)
    text.check_windows(seq_len)
    return text
