"""Drawing tokens: greedy at temperature 0, from softmax(logits / T) otherwise; and how drafts are
drawn at temperature above 0 (`evaluation.draft_sampling`).

- "sampled": a draft is drawn from the drafter's q = softmax(logits / T) and kept with
  probability min(1, p/q) (Leviathan et al.).
- "greedy": the draft is the drafter's argmax and verified as if q were one-hot on it: kept with
  probability p(x), the correction drawn from p without x. vLLM's default
  (`draft_sample_method: greedy`); equally lossless, usually with fewer drafts kept.
"""

from __future__ import annotations

import torch


def sample(logits: torch.Tensor, temperature: float, gen: torch.Generator | None) -> torch.Tensor:
    """logits: [..., V] -> token ids [...]."""
    if temperature == 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    flat = probs.reshape(-1, probs.shape[-1])
    draws = torch.multinomial(flat.cpu(), 1, generator=gen).to(probs.device)
    return draws.reshape(probs.shape[:-1])


DRAFT_SAMPLING = ("sampled", "greedy")


def drafting_temperature(temperature: float, draft_sampling: str) -> float:
    """The temperature drafts are drawn at: the sampling one, or 0 (the argmax) for greedy drafts."""
    if draft_sampling not in DRAFT_SAMPLING:
        raise ValueError(f"draft_sampling {draft_sampling!r}: use one of {', '.join(DRAFT_SAMPLING)}")
    return 0.0 if draft_sampling == "greedy" else temperature


def one_hot_q(drafts: torch.Tensor, vocab: int) -> torch.Tensor:
    """q of greedy drafts: all mass on the drafted token. drafts: [...] -> [..., vocab] float."""
    return torch.nn.functional.one_hot(drafts.long(), vocab).float()
