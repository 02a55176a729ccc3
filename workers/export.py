"""Export a trained drafter in the EAGLE-3 checkpoint layout vLLM and SGLang load.

The layout (config.json + model.safetensors) names one decoder layer `midlayer.*`, the fusion
`fc`, the final `norm`, the `lm_head` over the draft vocabulary and the `d2t` / `t2d` maps; the
token embedding is left out (both engines take the target's). vLLM reads the captured target
layers from `eagle_aux_hidden_state_layer_ids` (the HF hidden_states indices specfleet uses);
SGLang reads `eagle_config.eagle_aux_hidden_state_layer_ids`, one lower for the same layers.

Stock engines run the pre-norm EAGLE-3 layer only, with a fusion of three streams and no
per-stream norms or attention gate: other variants are refused rather than exported into
something that would load and then compute a different function.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import safetensors.torch
import torch

from workers.drafter import DrafterConfig, Eagle3Drafter
from workers.rope import rope_settings

# specfleet parameter name -> EAGLE-3 checkpoint name
NAMES = {
    "q_proj.weight": "midlayer.self_attn.q_proj.weight",
    "k_proj.weight": "midlayer.self_attn.k_proj.weight",
    "v_proj.weight": "midlayer.self_attn.v_proj.weight",
    "o_proj.weight": "midlayer.self_attn.o_proj.weight",
    "gate_proj.weight": "midlayer.mlp.gate_proj.weight",
    "up_proj.weight": "midlayer.mlp.up_proj.weight",
    "down_proj.weight": "midlayer.mlp.down_proj.weight",
    "input_norm.weight": "midlayer.input_layernorm.weight",
    "hidden_norm.weight": "midlayer.hidden_norm.weight",
    "post_attn_norm.weight": "midlayer.post_attention_layernorm.weight",
    "fc.weight": "fc.weight",
    "final_norm.weight": "norm.weight",
    "lm_head.weight": "lm_head.weight",
    "d2t": "d2t",
    "t2d": "t2d",
}


def exportable(cfg: DrafterConfig) -> None:
    """Raise ValueError naming the switch a stock EAGLE-3 engine cannot run."""
    problems = []
    if cfg.norm != "pre":
        problems.append("norm: post (engines hand the raw hidden state to the next step)")
    if cfg.fc_norm:
        problems.append("fc_norm: true (engines have no per-stream norms)")
    if cfg.attention != "standard":
        problems.append(f"attention: {cfg.attention} (engines have no attention gate)")
    if len(cfg.capture_layers) != 3:
        problems.append("fusion: last (EAGLE-3 fuses three target layers)")
    if problems:
        raise ValueError("this drafter has no EAGLE-3 engine layout: " + "; ".join(problems))


def eagle3_config(cfg: DrafterConfig, *, dtype: str = "bfloat16", max_positions: int = 8192) -> dict:
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": cfg.hidden_size,
        "target_hidden_size": cfg.hidden_size,
        "num_attention_heads": cfg.heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.dim_per_head,
        "intermediate_size": cfg.intermediate_size,
        "hidden_act": "silu",
        "num_hidden_layers": 1,
        "rms_norm_eps": cfg.rms_eps,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": dict(cfg.rope_scaling) if cfg.rope_scaling else None,
        "max_position_embeddings": max_positions,
        "vocab_size": cfg.vocab_size,
        "draft_vocab_size": cfg.draft_vocab or cfg.vocab_size,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "torch_dtype": dtype,
        "eagle_aux_hidden_state_layer_ids": list(cfg.capture_layers),
        "eagle_config": {
            "use_aux_hidden_state": True,
            "eagle_aux_hidden_state_layer_ids": [k - 1 for k in cfg.capture_layers],
        },
    }


def export_eagle3(drafter: Eagle3Drafter, folder: str | Path, *, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Write config.json and model.safetensors under folder; returns the folder."""
    exportable(drafter.cfg)
    state = drafter.state_dict()
    tensors = {}
    for ours, theirs in NAMES.items():
        t = state[ours].detach().to("cpu")
        if t.is_floating_point():
            t = t.to(dtype)
        tensors[theirs] = t.contiguous()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    safetensors.torch.save_file(tensors, str(folder / "model.safetensors"))
    config = eagle3_config(drafter.cfg, dtype=str(dtype).removeprefix("torch."))
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def import_eagle3(folder: str | Path, target_embedding: torch.Tensor) -> Eagle3Drafter:
    """An EAGLE-3 checkpoint (ours or another trainer's) as a specfleet drafter (pre-norm)."""
    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text())
    state = safetensors.torch.load_file(str(folder / "model.safetensors"))
    vocab, draft_vocab = config["vocab_size"], config.get("draft_vocab_size") or config["vocab_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    theta, scaling = rope_settings(SimpleNamespace(**config))
    cfg = DrafterConfig(
        hidden_size=config["hidden_size"], heads=heads,
        kv_heads=None if kv_heads == heads else kv_heads,
        head_dim=None if head_dim == config["hidden_size"] // heads else head_dim, rope_scaling=scaling,
        intermediate_size=config["intermediate_size"], vocab_size=vocab,
        capture_layers=tuple(config["eagle_aux_hidden_state_layer_ids"]),
        draft_vocab=None if draft_vocab == vocab else draft_vocab,
        rope_theta=theta, rms_eps=float(config["rms_norm_eps"]),
    )
    drafter = Eagle3Drafter(cfg)
    ours = {o: state[t].float() if state[t].is_floating_point() else state[t] for o, t in NAMES.items() if t in state}
    ours["embed.weight"] = target_embedding.float()
    ours.setdefault("d2t", torch.zeros(draft_vocab, dtype=torch.long))
    ours.setdefault("t2d", torch.ones(vocab, dtype=torch.bool))
    drafter.load_state_dict(ours, strict=True)
    return drafter.eval()
