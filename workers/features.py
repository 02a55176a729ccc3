"""The target's side of drafting: captured hidden states and next-token logits in one pass."""
from __future__ import annotations

import functools
import inspect

import torch


@torch.no_grad()
def target_pass(target, input_ids: torch.Tensor, capture: tuple[int, ...]):
    """input_ids: [B, T] -> (streams: list of [B, T, d] float32, logits: [B, T, V] float32)."""
    out = target(input_ids=input_ids, output_hidden_states=True, use_cache=False)
    streams = [out.hidden_states[i].float() for i in capture]
    return streams, out.logits.float()


@torch.no_grad()
def cached_forward_states(model, input_ids: torch.Tensor, cache=None, capture: tuple[int, ...] = ()):
    """One forward with the KV cache. Returns (logits [B, T, V], cache, captured streams [B, T, d] each).

    transformers renamed `past_key_values` to `cache` (5.x); accept both spellings.
    """
    name = _cache_kwarg(type(model))
    kwargs = {name: cache} if cache is not None else {}
    out = model(input_ids=input_ids, use_cache=True, output_hidden_states=bool(capture), **kwargs)
    new_cache = getattr(out, "cache", None) if name == "cache" else out.past_key_values
    streams = [out.hidden_states[i].float() for i in capture]
    return out.logits, new_cache, streams


@torch.no_grad()
def extend_logits(model, input_ids, attention_mask, position_ids, cache) -> torch.Tensor:
    """Logits of input_ids [B, T] after a KV cache of the earlier positions (attention_mask covers
    the cached positions and these). The cache grows by T positions."""
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True,
                **{_cache_kwarg(type(model)): cache})
    return out.logits


@functools.lru_cache(maxsize=None)
def _accepts(cls: type, name: str) -> bool:
    """Whether a model class's forward takes this keyword (looked up once per class)."""
    return name in inspect.signature(cls.forward).parameters


def _cache_kwarg(cls: type) -> str:
    return "cache" if _accepts(cls, "cache") else "past_key_values"
