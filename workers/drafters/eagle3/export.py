"""Export a trained drafter as the engines load EAGLE-3 heads: the EAGLE-3 layout vLLM and
SGLang read, or the speculators format (vllm-project/speculators) that vLLM documents.

The EAGLE-3 layout (config.json + model.safetensors) names one decoder layer `midlayer.*`, the
fusion `fc`, the final `norm`, the `lm_head` over the draft vocabulary and, where that is smaller
than the target's, the `d2t` / `t2d` maps; the token embedding is left out (both engines take the
target's). vLLM reads the captured target layers from `eagle_aux_hidden_state_layer_ids` (the HF
hidden_states indices specfleet uses); SGLang reads
`eagle_config.eagle_aux_hidden_state_layer_ids`, one lower for the same layers (recent SGLang adds
the one back only when the list starts at 1, which EAGLE-3's default capture, from hidden state 2,
does; a capture list starting elsewhere is read differently there). The speculators format keeps
the same weights as `layers.0.*`, the layer's settings in
`transformer_layer_config` and the verifier (target) it drafts for.
workers/drafters/eagle3/layouts.py reads all of these back.

Stock engines run the pre-norm EAGLE-3 layer only, with a fusion of three streams and no
per-stream norms or attention gate: other variants are refused rather than exported into
something that would load and then compute a different function.
"""

from __future__ import annotations

import json
from pathlib import Path

import safetensors.torch
import torch

from workers.drafters.eagle3.layouts import LAYER, OUTSIDE, PREFIX
from workers.drafters.eagle3.model import DrafterConfig, Eagle3Drafter

# Written only for a draft vocabulary smaller than the target's: over the whole vocabulary the maps
# are the identity, vLLM builds no map and refuses a checkpoint that holds one (seen in 0.32.0), and
# workers/drafters/eagle3/layouts.py reads their absence back as the identity.
VOCABULARY_MAPS = ("d2t", "t2d")


def names(layout: str) -> dict[str, str]:
    """specfleet parameter name -> the checkpoint's name in `layout` ("eagle" or "speculators")."""
    return {**{ours: PREFIX[layout] + theirs for ours, theirs in LAYER.items()}, **OUTSIDE}


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
    config = eagle3_config(drafter.cfg, dtype=str(dtype).removeprefix("torch."))
    return _write(drafter, folder, "eagle", config, dtype)


def speculators_config(
    cfg: DrafterConfig,
    *,
    verifier: str,
    dtype: str = "bfloat16",
    max_positions: int = 8192,
    speculative_tokens: int = 3,
) -> dict:
    """The speculators format's config: its Eagle3 fields, the Llama layer's settings nested, and
    the verifier (the target) with the default number of tokens to propose."""
    flat = eagle3_config(cfg, dtype=dtype, max_positions=max_positions)
    layer = {
        k: flat[k]
        for k in (
            "hidden_size",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "intermediate_size",
            "hidden_act",
            "num_hidden_layers",
            "rms_norm_eps",
            "rope_theta",
            "rope_scaling",
            "max_position_embeddings",
            "vocab_size",
            "attention_bias",
        )
    }
    return {
        "speculators_model_type": "eagle3",
        "architectures": ["Eagle3Speculator"],
        "transformer_layer_config": {"model_type": "llama", **layer},
        "draft_vocab_size": flat["draft_vocab_size"],
        "norm_before_residual": False,
        "target_hidden_size": cfg.hidden_size,
        "eagle_aux_hidden_state_layer_ids": list(cfg.capture_layers),
        "torch_dtype": dtype,
        "speculators_config": {
            "algorithm": "eagle3",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": speculative_tokens}],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": verifier, "architectures": ["LlamaForCausalLM"]},
        },
    }


def export_speculators(
    drafter: Eagle3Drafter,
    folder: str | Path,
    *,
    verifier: str,
    speculative_tokens: int = 3,
    dtype: torch.dtype = torch.bfloat16,
) -> Path:
    """Write the drafter in the speculators format (config.json + model.safetensors) under folder."""
    exportable(drafter.cfg)
    config = speculators_config(
        drafter.cfg, verifier=verifier, dtype=str(dtype).removeprefix("torch."), speculative_tokens=speculative_tokens
    )
    return _write(drafter, folder, "speculators", config, dtype)


def _write(drafter: Eagle3Drafter, folder: str | Path, layout: str, config: dict, dtype: torch.dtype) -> Path:
    state = drafter.state_dict()
    tensors = {}
    whole = (drafter.cfg.draft_vocab or drafter.cfg.vocab_size) == drafter.cfg.vocab_size
    for ours, theirs in names(layout).items():
        if whole and ours in VOCABULARY_MAPS:
            continue
        t = state[ours].detach().to("cpu")
        tensors[theirs] = (t.to(dtype) if t.is_floating_point() else t).contiguous()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    safetensors.torch.save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder
