"""Chat samples as token ids for a given tokenizer.

A tokenizer that carries its own chat template (a real model's: Llama-3, Qwen3, ...) formats
the turns its way, so "with template" means the format the model was tuned on; the built-in
tokenizers use specfleet's template (workers/data/chat.py). BOS is never part of the result: each
caller decides whether the sequence starts with it.
"""

from __future__ import annotations

import torch

from workers.data.chat import Sample, render_turns, samples


def has_own_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def turns_text(tokenizer, messages, *, template: bool, generation_prompt: bool) -> str:
    """Turns (pipeline.core.conversations.Message) as text: with the template, the tokenizer's own
    when it has one (which may add its default system turn), else specfleet's; without it, the
    bare texts. `generation_prompt`: end where the assistant's next turn begins. Never BOS."""
    if template and has_own_template(tokenizer):
        turns = [{"role": m.role, "content": m.content} for m in messages]
        text = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=generation_prompt)
        if tokenizer.bos_token and text.startswith(tokenizer.bos_token):
            text = text[len(tokenizer.bos_token) :]
        return text
    return render_turns(messages, template=template, generation_prompt=generation_prompt)


def turns_ids(tokenizer, messages, *, template: bool, generation_prompt: bool) -> list[int]:
    """turns_text as ids."""
    text = turns_text(tokenizer, messages, template=template, generation_prompt=generation_prompt)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def assistant_spans(tokenizer, messages) -> tuple[list[int], list[tuple[int, int]]]:
    """A whole conversation as ids (no BOS), and the [start, end) token ranges of its assistant turns
    (each turn's text and the template's end of turn). The text is cut where each assistant turn
    starts and ends and the pieces are tokenised one by one, so no token straddles a boundary.
    A template that renders earlier turns differently once later ones follow cannot be cut so."""
    cuts = []
    for i, m in enumerate(messages):
        if m.role == "assistant":
            cuts.append(
                (
                    turns_text(tokenizer, messages[:i], template=True, generation_prompt=True),
                    turns_text(tokenizer, messages[: i + 1], template=True, generation_prompt=False),
                )
            )
    whole = turns_text(tokenizer, messages, template=True, generation_prompt=False)
    ids: list[int] = []
    spans = []
    done = 0  # characters of `whole` tokenised so far
    for start_text, end_text in cuts:
        if not (whole.startswith(start_text) and whole.startswith(end_text)) or len(start_text) < done:
            raise ValueError(
                "the chat template renders earlier turns differently once later turns follow, so the "
                "assistant turns cannot be located; use training_data.answers: regenerate"
            )
        ids += _piece(tokenizer, whole[done : len(start_text)])
        begin = len(ids)
        ids += _piece(tokenizer, whole[len(start_text) : len(end_text)])
        spans.append((begin, len(ids)))
        done = len(end_text)
    ids += _piece(tokenizer, whole[done:])
    return ids, spans


def _piece(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"] if text else []


def chat_ids(tokenizer, sample: Sample, *, template: bool, answer: bool) -> list[int]:
    """A built-in sample's turns, to the end of its answer or to where the answer begins."""
    messages = sample.conversation().messages
    return turns_ids(tokenizer, messages if answer else messages[:-1], template=template, generation_prompt=not answer)


def chat_stream(tokenizer, split: str, max_chars: int) -> torch.Tensor:
    """Every chat sample of a split (thinned evenly to about max_chars), each as BOS + turns + EOS."""
    pool = samples(split)
    total = sum(len(s.question) + len(s.answer) for s in pool)
    stride = max(1, -(-total // max_chars))
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    ids: list[int] = []
    for sample in pool[::stride]:
        ids += bos + chat_ids(tokenizer, sample, template=True, answer=True) + eos
    return torch.tensor(ids, dtype=torch.long)
