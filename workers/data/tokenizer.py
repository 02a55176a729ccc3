"""Byte-level BPE tokenizers trained on a built-in corpus, wrapped for transformers.

Token ids: 0 = <pad>, 1 = <s> (BOS, the attention sink), 2 = </s> (EOS), then the chat
template's role markers (workers/data/chat.py), each a single token.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from workers.data.chat import CHAT_TOKENS
from workers.data.texts import documents

SPECIALS = ["<pad>", "<s>", "</s>", *CHAT_TOKENS]


def train_tokenizer(corpus: str, vocab_size: int, max_chars: int = 2_000_000) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(documents(corpus, "train", max_chars=max_chars), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        additional_special_tokens=CHAT_TOKENS,
    )


def token_stream(tokenizer, corpus: str, split: str, max_chars: int) -> torch.Tensor:
    """All documents of a split as one 1-D stream of ids, each document between BOS and EOS."""
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    ids: list[int] = []
    for text in documents(corpus, split, max_chars=max_chars):
        ids.append(bos)
        ids.extend(tokenizer(text, add_special_tokens=False)["input_ids"])
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


def sample_windows(
    stream: torch.Tensor, batch_size: int, seq_len: int, bos_id: int, gen: torch.Generator, aligned: bool = False
) -> torch.Tensor:
    """Random windows of seq_len tokens; the first token of each is replaced by BOS.

    Starting every window with BOS gives the model the sink token every prompt will have.
    aligned: start windows only where a document starts (chat samples: the template follows BOS).
    """
    if aligned:
        starts_ok = torch.nonzero(stream[: stream.numel() - seq_len] == bos_id).squeeze(1)
        starts = starts_ok[torch.randint(0, starts_ok.numel(), (batch_size,), generator=gen)]
    else:
        starts = torch.randint(0, stream.numel() - seq_len, (batch_size,), generator=gen)  # [B]
    batch = torch.stack([stream[s : s + seq_len] for s in starts.tolist()])  # [B, T]
    batch[:, 0] = bos_id
    return batch


def pad_id(tokenizer) -> int:
    """The id to pad batches with: the tokenizer's pad token, else its EOS, else 0."""
    if tokenizer.pad_token_id is not None:
        return tokenizer.pad_token_id
    return tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
