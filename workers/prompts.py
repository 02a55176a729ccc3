"""Held-out evaluation prompts, one builder per evaluation condition.

Conditions on the chat corpus change the prompt format: with or without the chat template,
with or without BOS, or many earlier turns in front (long context). On the plain corpora the
prompt is a window of held-out text after BOS. Noise conditions use the default prompts and
perturb the drafter instead (workers/noise.py).
"""
from __future__ import annotations

import dataclasses

import torch

from workers.chat import samples
from workers.chat_format import chat_ids
from workers.tokenizer import token_stream

FORMATS = {  # condition -> (chat template, BOS)
    "default": (True, True),
    "template+bos": (True, True),
    "template_no_bos": (True, False),
    "no_template": (False, True),
    "no_template_no_bos": (False, False),
}


def prompt_format(condition: str) -> str:
    """The prompt builder a condition uses (noise conditions reuse the default prompts)."""
    return "default" if "_noise@" in condition else condition


def build_prompts(tokenizer, *, corpus: str, condition: str, num_prompts: int, prompt_len: int,
                  long_context_len: int, seed: int, answer_prefix: int = 4) -> list[torch.Tensor]:
    """num_prompts 1-D id tensors (lengths may differ) for one condition. A chat prompt ends
    `answer_prefix` tokens into the reference answer (0: where the assistant's turn begins)."""
    fmt = prompt_format(condition)
    if corpus != "chat":
        length = long_context_len if fmt == "long_context" else prompt_len
        return _text_windows(tokenizer, corpus, num_prompts, length, seed)
    chosen = _pick(len(samples("heldout")), num_prompts, seed)
    pool = samples("heldout")
    if fmt == "long_context":
        return [_long_chat(tokenizer, pool, i, long_context_len, answer_prefix) for i in chosen]
    template, bos = FORMATS[fmt]
    if bos and tokenizer.bos_token_id is None:
        raise ValueError(f"condition '{condition}' starts prompts with BOS, but this tokenizer has no BOS token")
    return [_chat_prompt(tokenizer, pool[i], template=template, bos=bos, max_len=prompt_len, answer_prefix=answer_prefix)
            for i in chosen]


def _pick(n: int, k: int, seed: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randperm(n, generator=gen)[:k].tolist()


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _chat_prompt(tokenizer, sample, *, template: bool, bos: bool, max_len: int, answer_prefix: int) -> torch.Tensor:
    """[BOS] + the turns up to the assistant's answer + its first answer_prefix tokens, <= max_len."""
    answer = _ids(tokenizer, sample.answer)[:answer_prefix]
    room = max_len - len(answer) - int(bos)
    head = chat_ids(tokenizer, sample, template=template, answer=False)
    if len(head) > room:  # shorten the question, never the template around it
        cut = dataclasses.replace(sample, question="")
        frame = len(chat_ids(tokenizer, cut, template=template, answer=False))
        words = _ids(tokenizer, sample.question)[: max(0, room - frame)]
        head = chat_ids(tokenizer, dataclasses.replace(sample, question=tokenizer.decode(words)),
                        template=template, answer=False)[:room]
    ids = ([tokenizer.bos_token_id] if bos else []) + head + answer
    return torch.tensor(ids, dtype=torch.long)


def _long_chat(tokenizer, pool, index: int, min_len: int, answer_prefix: int) -> torch.Tensor:
    """Earlier full turns, then the prompt of sample `index`, at least min_len tokens in all."""
    last = _chat_prompt(tokenizer, pool[index], template=True, bos=False, max_len=10_000, answer_prefix=answer_prefix)
    history: list[int] = []
    j = index
    while len(history) + last.numel() + 1 < min_len:
        j = (j + 7919) % len(pool)  # a fixed stride through the held-out pool: other questions
        history = chat_ids(tokenizer, pool[j], template=True, answer=True) + history
    if tokenizer.bos_token_id is None:
        raise ValueError("condition 'long_context' starts prompts with BOS, but this tokenizer has no BOS token")
    ids = [tokenizer.bos_token_id] + history + last.tolist()
    return torch.tensor(ids, dtype=torch.long)


def _text_windows(tokenizer, corpus: str, num_prompts: int, length: int, seed: int) -> list[torch.Tensor]:
    stream = token_stream(tokenizer, corpus, "heldout", max_chars=max(400_000, length * num_prompts * 8))
    if stream.numel() < length + num_prompts:
        raise ValueError(f"held-out {corpus} corpus too small for {num_prompts} prompts of {length} tokens")
    starts = _pick(stream.numel() - length, num_prompts, seed)
    out = []
    for s in starts:
        window = stream[s : s + length].clone()
        if tokenizer.bos_token_id is not None:
            window[0] = tokenizer.bos_token_id
        out.append(window)
    return out
