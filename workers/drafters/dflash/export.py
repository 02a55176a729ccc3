"""Export a trained DFlash drafter as vLLM loads one (`method: dflash`, architecture
`DFlashDraftModel`): config.json and model.safetensors.

vLLM reads the draft config with transformers' AutoConfig (`model_type: qwen3`: the layer is
Qwen3's, with per-head q_norm and k_norm) and `dflash_config`: the mask token's id and the 0-based
target layers (vLLM captures the residual stream entering layer i + 1, the output of layer i, as
specfleet's `hidden_states[i + 1]` is). The weights carry no `model.` prefix: `fc`, `hidden_norm`,
`norm`, `layers.N.self_attn.{q,k,v,o}_proj`, `layers.N.self_attn.{q,k}_norm`,
`layers.N.{input,post_attention}_layernorm`, `layers.N.mlp.{gate,up,down}_proj`. The token
embedding and the output head are left out: vLLM takes the target's, whose row at the mask
token's id is what the drafter was trained to read as the mask. vLLM does not report a missing
weight (it would run with its initial value), so every name is written.
"""

from __future__ import annotations

import json
from pathlib import Path

import safetensors.torch
import torch

from workers.drafters.dflash.model import DFlashConfig, DFlashDrafter

LAYER = {  # specfleet's name in a BlockLayer -> vLLM's under layers.N
    "input_norm.weight": "input_layernorm.weight",
    "q_proj.weight": "self_attn.q_proj.weight",
    "k_proj.weight": "self_attn.k_proj.weight",
    "v_proj.weight": "self_attn.v_proj.weight",
    "o_proj.weight": "self_attn.o_proj.weight",
    "q_norm.weight": "self_attn.q_norm.weight",
    "k_norm.weight": "self_attn.k_norm.weight",
    "post_attn_norm.weight": "post_attention_layernorm.weight",
    "gate_proj.weight": "mlp.gate_proj.weight",
    "up_proj.weight": "mlp.up_proj.weight",
    "down_proj.weight": "mlp.down_proj.weight",
}
OUTSIDE = {"fc.weight": "fc.weight", "hidden_norm.weight": "hidden_norm.weight", "final_norm.weight": "norm.weight"}


def names(layers: int) -> dict[str, str]:
    """specfleet parameter name -> vLLM's, for a drafter of `layers` layers (the embedding apart)."""
    inside = {f"layers.{i}.{ours}": f"layers.{i}.{theirs}" for i in range(layers) for ours, theirs in LAYER.items()}
    return {**inside, **OUTSIDE}


def dflash_config(cfg: DFlashConfig, *, dtype: str = "bfloat16") -> dict:
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": cfg.hidden_size,
        "target_hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.layers,
        "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.dim_per_head,
        "intermediate_size": cfg.intermediate_size,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.rms_eps,
        "rope_theta": cfg.rope_theta,  # vLLM's default without it is 1e6
        "rope_scaling": dict(cfg.rope_scaling) if cfg.rope_scaling else None,
        "max_position_embeddings": cfg.max_positions,  # vLLM does not raise a DFlash drafter's to the target's
        "vocab_size": cfg.vocab_size,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "torch_dtype": dtype,
        "block_size": cfg.block_size,
        "dflash_config": {
            "mask_token_id": cfg.mask_token_id,
            "target_layer_ids": list(cfg.target_layer_ids),
            "use_aux_hidden_state": True,
            "causal": False,
        },
    }


def export_dflash(drafter: DFlashDrafter, folder: str | Path, *, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Write config.json and model.safetensors under folder; returns the folder."""
    config = dflash_config(drafter.cfg, dtype=str(dtype).removeprefix("torch."))
    state = drafter.state_dict()
    tensors = {
        theirs: state[ours].detach().to("cpu", dtype).contiguous() for ours, theirs in names(drafter.cfg.layers).items()
    }
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    safetensors.torch.save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder
