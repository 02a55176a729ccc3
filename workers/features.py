"""The target's side of drafting: captured hidden states and next-token logits in one pass."""
from __future__ import annotations

import inspect

import torch


@torch.no_grad()
def target_pass(target, input_ids: torch.Tensor, capture: tuple[int, ...]):
    """input_ids: [B, T] -> (streams: list of [B, T, d] float32, logits: [B, T, V] float32)."""
    out = target(input_ids=input_ids, output_hidden_states=True, use_cache=False)
    streams = [out.hidden_states[i].float() for i in capture]
    return streams, out.logits.float()


@torch.no_grad()
def cached_forward(model, input_ids: torch.Tensor, cache=None):
    """One forward with the KV cache; returns (logits [B, T, V], cache).

    transformers renamed `past_key_values` to `cache` (5.x); accept both spellings.
    """
    name = _cache_kwarg(type(model))
    kwargs = {name: cache} if cache is not None else {}
    out = model(input_ids=input_ids, use_cache=True, **kwargs)
    new_cache = getattr(out, "cache", None) if name == "cache" else out.past_key_values
    return out.logits, new_cache


_CACHE_KWARG: dict[type, str] = {}


def _cache_kwarg(cls: type) -> str:
    if cls not in _CACHE_KWARG:
        params = inspect.signature(cls.forward).parameters
        _CACHE_KWARG[cls] = "cache" if "cache" in params else "past_key_values"
    return _CACHE_KWARG[cls]
