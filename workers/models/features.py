"""The target's side of drafting: captured hidden states and next-token logits in one pass."""

from __future__ import annotations

import functools
import inspect

import torch


@torch.no_grad()
def target_pass(target, input_ids: torch.Tensor, capture: tuple[int, ...], head: HeadRows | None = None):
    """input_ids: [B, T] -> (streams: list of [B, T, d] float32, logits or None).

    The logits are computed only when `head` is given, and only over its rows (a draft vocabulary),
    from the final hidden state: an 8B target's full float32 logits over a batch of 8 x 2048 tokens
    would take 8 GB that no caller reads."""
    out = target(input_ids=input_ids, output_hidden_states=True, use_cache=False, logits_to_keep=1)
    streams = [out.hidden_states[i].float() for i in capture]
    return streams, head(out.hidden_states[-1]) if head is not None else None


class HeadRows:
    """The target's LM head restricted to some token ids (all of them for None), sliced once per set
    of ids: `head(final_states)` gives float32 logits over those ids, in their order."""

    def __init__(self, target):
        self.target, self._rows = target, None  # (ids, weight, bias)

    def select(self, vocab: torch.Tensor | None) -> HeadRows:
        if self._rows is None or self._rows[0] is not vocab:
            head = self.target.get_output_embeddings()
            weight, bias = head.weight, head.bias
            if vocab is not None:
                index = vocab.to(weight.device)
                weight, bias = weight[index], (bias[index] if bias is not None else None)
            self._rows = (vocab, weight, bias)
        return self

    @torch.no_grad()
    def __call__(self, final: torch.Tensor) -> torch.Tensor:
        _, weight, bias = self._rows  # on the head's GPU, where a split target has it elsewhere
        return torch.nn.functional.linear(final.to(weight.device, weight.dtype), weight, bias).float().to(final.device)


@torch.no_grad()
def cached_forward_states(
    model, input_ids: torch.Tensor, cache=None, capture: tuple[int, ...] = (), last_only: bool = False
):
    """One forward with the KV cache. Returns (logits [B, T, V], cache, captured streams [B, T, d] each);
    with last_only, the logits of the last position alone ([B, 1, V]: a prefill whose cache is what
    is wanted, where B x T x V logits of a long batch would not fit).

    transformers renamed `past_key_values` to `cache` (5.x); accept both spellings.
    """
    name = _cache_kwarg(type(model))
    kwargs = {name: cache} if cache is not None else {}
    if last_only:
        kwargs["logits_to_keep"] = 1
    out = model(input_ids=input_ids, use_cache=True, output_hidden_states=bool(capture), **kwargs)
    new_cache = getattr(out, "cache", None) if name == "cache" else out.past_key_values
    streams = [out.hidden_states[i].float() for i in capture]
    return out.logits, new_cache, streams


@torch.no_grad()
def extend_logits(model, input_ids, attention_mask, position_ids, cache) -> torch.Tensor:
    """Logits of input_ids [B, T] after a KV cache of the earlier positions (attention_mask covers
    the cached positions and these). The cache grows by T positions."""
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=True,
        **{_cache_kwarg(type(model)): cache},
    )
    return out.logits


@torch.no_grad()
def tree_forward_states(model, input_ids, position_ids, mask, cache, capture: tuple[int, ...] = ()):
    """One forward of new tokens [1, T] after a KV cache. mask: [T, K] bool over the last K positions
    (the newest cached ones and the T new ones, K >= T): which of them each new token reads; every
    position before them is read by all. Returns (logits [1, T, V], the cache grown by T positions,
    captured streams [1, T, d] each)."""
    before = cache.get_seq_length() + input_ids.shape[1] - mask.shape[1]
    allowed = torch.cat([mask.new_ones(mask.shape[0], before), mask], dim=1)
    dtype = next(model.parameters()).dtype
    additive = torch.zeros(allowed.shape, dtype=dtype, device=input_ids.device)
    additive.masked_fill_(~allowed.to(input_ids.device), torch.finfo(dtype).min)  # what eager and sdpa both read
    out = model(
        input_ids=input_ids,
        attention_mask=additive[None, None],
        position_ids=position_ids,
        use_cache=True,
        output_hidden_states=bool(capture),
        **{_cache_kwarg(type(model)): cache},
    )
    streams = [out.hidden_states[i].float() for i in capture]
    return out.logits, cache, streams


def keep_path(cache, past: int, path: torch.Tensor) -> None:
    """After a tree pass over positions past.., keep the context and only the tree's entries at
    `path` (increasing offsets from past, 0 first): they move to past, past + 1, ... and the rest
    is cropped. Only the tree's entries are copied; works on transformers 4.x and 5.x caches."""
    layers = getattr(cache, "layers", None)
    if layers is not None:  # transformers 5.x: one layer object per layer (uninitialised ones skipped)
        tensors = [
            t
            for layer in layers
            for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
            if t is not None and t.numel()
        ]
    else:  # 4.x: parallel lists
        tensors = [*cache.key_cache, *cache.value_cache]
    n = path.numel()
    for t in tensors:
        t[..., past : past + n, :] = t.index_select(-2, past + path.to(t.device))
    extra = cache.get_seq_length() - past - n
    if extra:
        cache.crop(-extra)


@functools.cache
def _accepts(cls: type, name: str) -> bool:
    """Whether a model class's forward takes this keyword (looked up once per class)."""
    return name in inspect.signature(cls.forward).parameters


def _cache_kwarg(cls: type) -> str:
    return "cache" if _accepts(cls, "cache") else "past_key_values"
