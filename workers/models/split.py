"""A target larger than one device: its layers split over the GPUs of one node.

A job given `num_gpus: N` (N > 1, whole) loads its target with a device map that puts consecutive
decoder layers on GPUs 0..N-1, balanced by size (accelerate's placement, as transformers'
`device_map="balanced"` makes it); the embedding is on GPU 0 and, where the LM head shares the
embedding's weight, the head too. accelerate's hooks move each layer's inputs to its GPU and bring
the model's outputs (logits, hidden states) back to the device of its input ids, so the drafter
and everything the engine allocates stay on GPU 0 (`pick_device`), the device of the inputs.
"""

from __future__ import annotations

import torch


def split_map(config, gpus: tuple[int, ...], dtype: torch.dtype, max_memory: dict | None = None) -> dict[str, int]:
    """{module name: GPU index} of a causal LM of `config` over the GPUs `gpus` (indices, the first
    holding the embedding). max_memory: bytes per GPU index (None: each GPU's free memory)."""
    from accelerate import infer_auto_device_map, init_empty_weights
    from accelerate.utils import get_balanced_memory
    from transformers import AutoModelForCausalLM

    layers = getattr(config, "num_hidden_layers", None)
    if layers is not None and len(gpus) > layers:
        raise ValueError(f"num_gpus: {len(gpus)} GPUs for a target of {layers} layers; give at most {layers}")
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config)
    model.tie_weights()
    keep = getattr(model, "_no_split_modules", None) or []
    budget = max_memory if max_memory is not None else {i: torch.cuda.mem_get_info(i)[0] for i in gpus}
    balanced = get_balanced_memory(model, max_memory=budget, no_split_module_classes=keep, dtype=dtype)
    placed = dict(infer_auto_device_map(model, max_memory=balanced, no_split_module_classes=keep, dtype=dtype))
    where = set(placed.values())
    if not where <= set(gpus):
        raise ValueError(
            f"num_gpus: the target does not fit {len(gpus)} GPUs (accelerate placed part of it on "
            f"{sorted(str(w) for w in where - set(gpus))}); give more GPUs"
        )
    if where != set(gpus) or placed.get("model.embed_tokens", gpus[0]) != gpus[0]:
        # the hardware key counts the GPUs the target is on, and the inputs go to the first
        raise ValueError(
            f"num_gpus: accelerate's split over {len(gpus)} GPUs uses {sorted(where)} with the embedding on "
            f"{placed.get('model.embed_tokens')}; give fewer GPUs"
        )
    return placed
