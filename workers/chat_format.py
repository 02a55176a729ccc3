"""Chat samples as token ids for a given tokenizer.

A tokenizer that carries its own chat template (a real model's: Llama-3, Qwen3, ...) formats
the turns its way, so "with template" means the format the model was tuned on; the built-in
tokenizers use specfleet's template (workers/chat.py). BOS is never part of the result: each
caller decides whether the sequence starts with it.
"""
from __future__ import annotations

import torch

from workers.chat import Sample, render, samples


def has_own_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def chat_ids(tokenizer, sample: Sample, *, template: bool, answer: bool) -> list[int]:
    if template and has_own_template(tokenizer):
        messages = [{"role": "system", "content": sample.system}, {"role": "user", "content": sample.question}]
        if answer:
            messages.append({"role": "assistant", "content": sample.answer})
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=not answer)
        if tokenizer.bos_token and text.startswith(tokenizer.bos_token):
            text = text[len(tokenizer.bos_token):]
    else:
        text = render(sample, template=template, answer=answer)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


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
