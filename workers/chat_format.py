"""Chat samples as token ids for a given tokenizer.

A tokenizer that carries its own chat template (a real model's: Llama-3, Qwen3, ...) formats
the turns its way, so "with template" means the format the model was tuned on; the built-in
tokenizers use specfleet's template (workers/chat.py). BOS is never part of the result: each
caller decides whether the sequence starts with it.
"""
from __future__ import annotations

import torch

from workers.chat import Sample, render_turns, samples


def has_own_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def turns_ids(tokenizer, messages, *, template: bool, generation_prompt: bool) -> list[int]:
    """Turns (pipeline.core.conversations.Message) as ids: with the template, the tokenizer's own
    when it has one (which may add its default system turn), else specfleet's; without it, the
    bare texts. `generation_prompt`: end where the assistant's next turn begins."""
    if template and has_own_template(tokenizer):
        turns = [{"role": m.role, "content": m.content} for m in messages]
        text = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=generation_prompt)
        if tokenizer.bos_token and text.startswith(tokenizer.bos_token):
            text = text[len(tokenizer.bos_token):]
    else:
        text = render_turns(messages, template=template, generation_prompt=generation_prompt)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


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
