"""Held-out evaluation prompts, one builder per evaluation condition.

Conditions on the chat corpus, or on a user's prompts file, change the prompt format: with or
without the chat template, with or without BOS, or many earlier turns in front (long context).
On the plain corpora the prompt is a window of held-out text after BOS. Noise conditions use the default prompts and
perturb the drafter instead (workers/measure/noise.py).
"""

from __future__ import annotations

import socket
from functools import lru_cache
from pathlib import Path

import torch

from pipeline.core.conversations import Conversation, Message, file_digest, read_conversations
from pipeline.core.settings import PromptsFile
from workers.data.chat import samples
from workers.data.chat_format import turns_ids
from workers.data.tokenizer import token_stream

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


def build_prompts(
    tokenizer,
    *,
    corpus: str,
    condition: str,
    num_prompts: int,
    prompt_len: int,
    long_context_len: int,
    seed: int,
    answer_prefix: int = 4,
    prompts_file: PromptsFile | None = None,
) -> list[torch.Tensor]:
    """num_prompts 1-D id tensors (lengths may differ) for one condition. A chat prompt ends
    `answer_prefix` tokens into the reference answer (0, or a conversation without one: where the
    assistant's turn begins). With a prompts file, its conversations replace the built-in corpus."""
    fmt = prompt_format(condition)
    if corpus != "chat" and prompts_file is None:
        length = long_context_len if fmt == "long_context" else prompt_len
        return _text_windows(tokenizer, corpus, num_prompts, length, seed)
    pool = conversation_pool(prompts_file)
    chosen = pick(len(pool), num_prompts, seed)
    if fmt == "long_context":
        return [_long_chat(tokenizer, pool, i, long_context_len, answer_prefix) for i in chosen]
    template, bos = FORMATS[fmt]
    if bos and tokenizer.bos_token_id is None:
        raise ValueError(f"condition '{condition}' starts prompts with BOS, but this tokenizer has no BOS token")
    return [
        _chat_prompt(tokenizer, pool[i], template=template, bos=bos, max_len=prompt_len, answer_prefix=answer_prefix)
        for i in chosen
    ]


def prompt_categories(prompts_file: PromptsFile | None, num_prompts: int, seed: int) -> tuple[str, ...]:
    """The category of each prompt build_prompts returns, in its order; () when the prompts have none."""
    if prompts_file is None or not prompts_file.categories:
        return ()
    pool = conversation_pool(prompts_file)
    return tuple(pool[i].category for i in pick(len(pool), num_prompts, seed))


def conversation_pool(prompts_file: PromptsFile | None, split: str = "heldout") -> tuple[Conversation, ...]:
    """The conversations chat prompts come from: the prompts file's, or the built-in samples of a
    split (held-out ones for evaluation, training ones for a drafter's training questions)."""
    if prompts_file is None:
        return tuple(s.conversation() for s in samples(split))
    return read_prompts_file(prompts_file)


@lru_cache(maxsize=4)
def read_prompts_file(prompts_file: PromptsFile) -> tuple[Conversation, ...]:
    """The file's conversations, if it is still the file the spec was checked against (same sha256)."""
    path = Path(prompts_file.path)
    if not path.is_file():
        raise FileNotFoundError(
            f"prompts file {path}: not found on node {socket.gethostname()}; every worker "
            "must see it at this path (shared storage)"
        )
    if prompts_file.digest is not None and file_digest(path) != prompts_file.digest:
        raise ValueError(f"prompts file {path}: changed since the spec was read (sha256 differs); run the spec again")
    return tuple(read_conversations(path, prompts_file.category))


def pick(n: int, k: int, seed: int) -> list[int]:
    """k of range(n) in a seeded random order (all of them for k = n)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randperm(n, generator=gen)[:k].tolist()


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _chat_prompt(
    tokenizer, conversation: Conversation, *, template: bool, bos: bool, max_len: int, answer_prefix: int
) -> torch.Tensor:
    """[BOS] + the turns up to the assistant's answer + its first answer_prefix tokens, <= max_len.
    Too long: the earliest turns after the system turn go first, then the end of the last user turn."""
    turns, reference = conversation.prompt_turns()
    answer = _ids(tokenizer, reference)[:answer_prefix] if reference is not None else []
    room = max_len - len(answer) - int(bos)

    def head_of(messages) -> list[int]:
        return turns_ids(tokenizer, messages, template=template, generation_prompt=True)

    head = head_of(turns)
    system = tuple(m for m in turns if m.role == "system")
    body = turns[len(system) :]
    while len(head) > room and len(body) > 1:  # drop the oldest exchange: body starts with a user turn again
        body = body[1:]
        while body[0].role != "user":
            body = body[1:]
        head = head_of(system + body)
    if len(head) > room:  # one user turn left: shorten it, never the template around it
        last = body[-1]
        frame = len(head_of(system + (Message("user", ""),)))
        words = _ids(tokenizer, last.content)[: max(0, room - frame)]
        head = head_of(system + (Message("user", tokenizer.decode(words)),))[:room]
    ids = ([tokenizer.bos_token_id] if bos else []) + head + answer
    return torch.tensor(ids, dtype=torch.long)


def _long_chat(tokenizer, pool, index: int, min_len: int, answer_prefix: int) -> torch.Tensor:
    """Earlier whole conversations, then the prompt of conversation `index`, at least min_len tokens in all."""
    last = _chat_prompt(tokenizer, pool[index], template=True, bos=False, max_len=10_000, answer_prefix=answer_prefix)
    history: list[int] = []
    j = index
    while len(history) + last.numel() + 1 < min_len:
        j = (j + 7919) % len(pool)  # a fixed stride through the pool: other conversations
        history = turns_ids(tokenizer, pool[j].messages, template=True, generation_prompt=False) + history
    if tokenizer.bos_token_id is None:
        raise ValueError("condition 'long_context' starts prompts with BOS, but this tokenizer has no BOS token")
    ids = [tokenizer.bos_token_id] + history + last.tolist()
    return torch.tensor(ids, dtype=torch.long)


def _text_windows(tokenizer, corpus: str, num_prompts: int, length: int, seed: int) -> list[torch.Tensor]:
    stream = token_stream(tokenizer, corpus, "heldout", max_chars=max(400_000, length * num_prompts * 8))
    if stream.numel() < length + num_prompts:
        raise ValueError(f"held-out {corpus} corpus too small for {num_prompts} prompts of {length} tokens")
    starts = pick(stream.numel() - length, num_prompts, seed)
    out = []
    for s in starts:
        window = stream[s : s + length].clone()
        if tokenizer.bos_token_id is not None:
            window[0] = tokenizer.bos_token_id
        out.append(window)
    return out
