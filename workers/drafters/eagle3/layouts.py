"""EAGLE-3 drafters as other trainers publish them, read into a specfleet drafter.

A spec's `eagle3` drafter with `path:` (a local folder or a hub id) is read here and measured as
it is: no training job runs, and the checkpoint sets the variant, so `norm`, `fc_norm`,
`fusion`, `attention`, `draft_vocab`, `capture_layers` and `train` may not be given beside it
(pipeline/core/model_settings.py). Grouped key/value heads, `head_dim`, RoPE scaling and the d2t /
t2d maps carry over. workers/drafters/eagle3/export.py writes both the EAGLE-3 layout and the
speculators format.

All three layouts hold one Llama decoder layer whose attention reads
cat(input_layernorm(embedding), hidden_norm(fused hidden)) (2 x hidden wide, grouped key/value
heads allowed), the fusion `fc` over three captured target states, a final `norm`, an
`lm_head` over the draft vocabulary and the `d2t` (draft id i is target id i + d2t[i]) and
`t2d` (target ids the head covers) maps. They differ in names and in where the captured
layers are kept. Here a captured layer k is `hidden_states[k]` of the target, the residual
stream entering decoder layer k.

- EAGLE authors (SafeAILab/EAGLE, the yuhuili/EAGLE3-* checkpoints): a flat Llama config plus
  `draft_vocab_size`; weights `midlayer.*`, in model.safetensors or pytorch_model.bin; no
  embedding (the target's is used). The captured layers are not recorded: the authors' target
  code captures layers 2, N/2 and N-3 of an N-layer target. A missing `rope_theta` means
  10,000 (not the target's), a missing `head_dim` hidden / heads.
- SpecForge: the same names and config (with `head_dim` and rope settings); custom captured
  layers sit in `eagle_config.eagle_aux_hidden_state_layer_ids`, counted as layer outputs (k
  there is hidden_states[k + 1], so its default 1, N/2-1, N-4 is the authors' 2, N/2, N-3).
  Optional per-stream norms `fc_norm.{0,1,2}`; `norm_output: false` (no final norm) is not
  supported.
- speculators (vllm-project/speculators, what vLLM documents): `speculators_model_type:
  eagle3`; the layer's settings in `transformer_layer_config`, saved as the difference from
  the transformers defaults of its `model_type`; weights `layers.0.*`, usually with
  `embed_tokens`; captured layers at the top level as hidden_states indices. `fc_norm` is the
  per-stream norm, `norm_output` (feed the normalised state to the next step) is specfleet's
  post-norm; `norm_before_residual` and `norm_before_fc` are not supported.

A nested id list is read as counted in layer outputs (SpecForge's convention) when it starts
at 0 or 1, and as hidden_states indices when it starts higher, as recent SGLang servers read
it (no input layer is captured at 0 or 1 by the EAGLE-3 default, which starts at 2).
Anything this drafter cannot compute exactly (more than one layer, a target width other than
the drafter's, attention biases, Qwen3-style q/k norms) is refused by name rather than loaded
approximately.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import torch

from workers.drafters.eagle3.model import DrafterConfig, Eagle3Drafter
from workers.drafters.target_layers import capture_layers
from workers.models.rope import rope_settings

# the layer's weights as specfleet names them -> the EAGLE authors' / SpecForge name
LAYER = {
    "q_proj.weight": "self_attn.q_proj.weight",
    "k_proj.weight": "self_attn.k_proj.weight",
    "v_proj.weight": "self_attn.v_proj.weight",
    "o_proj.weight": "self_attn.o_proj.weight",
    "gate_proj.weight": "mlp.gate_proj.weight",
    "up_proj.weight": "mlp.up_proj.weight",
    "down_proj.weight": "mlp.down_proj.weight",
    "input_norm.weight": "input_layernorm.weight",
    "hidden_norm.weight": "hidden_norm.weight",
    "post_attn_norm.weight": "post_attention_layernorm.weight",
}
OUTSIDE = {
    "fc.weight": "fc.weight",
    "final_norm.weight": "norm.weight",
    "lm_head.weight": "lm_head.weight",
    "d2t": "d2t",
    "t2d": "t2d",
}
PREFIX = {"eagle": "midlayer.", "speculators": "layers.0."}


class CheckpointError(RuntimeError):
    """A drafter checkpoint that cannot be read as this drafter; the message names file and field."""


def checkpoint_folder(path: str) -> Path:
    """A local folder as it is; a hub id fetched (config and weights only) into the hub cache."""
    from pipeline.core.sources import looks_like_path

    if looks_like_path(path):
        return Path(path).expanduser()
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id=path, allow_patterns=["*.json", "*.safetensors", "*.bin"]))
    except Exception as exc:  # offline, unknown repo, no access: one line that names it
        raise CheckpointError(
            f"drafter path {path}: cannot fetch it from the Hugging Face hub "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        ) from None


def read_folder(folder: str | Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config.json, every weight) of a checkpoint folder: model.safetensors, its shards, or
    pytorch_model.bin (read without running pickled code)."""
    import safetensors.torch

    folder = Path(folder)
    config_file = folder / "config.json"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{config_file}: cannot read the drafter's config ({exc})") from None
    files = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("pytorch_model*.bin"))
    if not files:
        raise CheckpointError(f"{folder}: no model.safetensors or pytorch_model.bin")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            if f.suffix == ".safetensors":
                state.update(safetensors.torch.load_file(str(f)))
            else:
                state.update(torch.load(f, map_location="cpu", weights_only=True))
        except Exception as exc:  # a truncated or foreign file: name it
            raise CheckpointError(f"{f}: cannot read the drafter's weights ({str(exc).splitlines()[0]})") from None
    return config, state


def layout_of(config: dict) -> str:
    return "speculators" if config.get("speculators_model_type") is not None else "eagle"


def layer_settings(config: dict, layout: str) -> dict:
    """The decoder layer's settings with every default filled in (a speculators file keeps only
    what differs from the transformers defaults of its model_type)."""
    if layout == "eagle":
        return config
    if config.get("speculators_model_type") != "eagle3":
        raise CheckpointError(f"config.json: speculators_model_type {config['speculators_model_type']!r} is not eagle3")
    from transformers import CONFIG_MAPPING

    layer = dict(config.get("transformer_layer_config") or {})
    model_type = layer.pop("model_type", "llama")
    if model_type != "llama":
        raise CheckpointError(
            f"config.json: transformer_layer_config.model_type {model_type!r}: only Llama "
            "decoder layers are supported (Qwen3 layers add q/k norms)"
        )
    if "norm_before_residual" not in config:
        raise CheckpointError(
            "config.json: no norm_before_residual (speculators reads its absence as false, vLLM as true); set it"
        )
    # what was left out equals LlamaConfig()'s own defaults (not values derived from the saved fields)
    defaults = CONFIG_MAPPING["llama"]().to_dict()
    if "rope_theta" in layer or "rope_scaling" in layer:  # older spellings replace the newer default
        defaults.pop("rope_parameters", None)
    return {**defaults, **layer}


def captured(config: dict, target_layers: int) -> tuple[int, ...]:
    """The target hidden_states indices the fusion reads."""
    top = config.get("eagle_aux_hidden_state_layer_ids")
    nested = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if top:
        ids = tuple(int(i) for i in top)
    elif nested:
        shift = 1 if int(nested[0]) <= 1 else 0  # SpecForge counts outputs: its lists start at 0 or 1
        ids = tuple(int(i) + shift for i in nested)
    else:
        return capture_layers(target_layers, "tri")
    if len(ids) != 3 or len(set(ids)) != 3 or min(ids) < 0 or max(ids) > target_layers:
        raise CheckpointError(
            f"config.json: captured layers {list(ids)} do not fit a target with hidden states 0..{target_layers}"
        )
    return ids


def drafter_config(config: dict, target_layers: int, vocab_size: int, weights=()) -> DrafterConfig:
    """The drafter's shape and variant from a checkpoint's config (and the names of its weights,
    which show per-stream norms a config may not mention)."""
    try:
        return _drafter_config(config, target_layers, vocab_size, set(weights))
    except KeyError as exc:
        raise CheckpointError(f"config.json: no {exc.args[0]!r} field") from None
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"config.json: {str(exc).splitlines()[0]}") from None


def _drafter_config(config: dict, target_layers: int, vocab_size: int, weights: set) -> DrafterConfig:
    layout = layout_of(config)
    layer = layer_settings(config, layout)
    for flag, why in (
        ("norm_before_residual", "the residual after hidden_norm"),
        ("norm_before_fc", "one norm over the concatenated streams"),
        ("attention_bias", "biased attention projections"),
        ("mlp_bias", "biased MLP projections"),
    ):
        if config.get(flag) or layer.get(flag):
            raise CheckpointError(f"config.json: {flag}: true ({why}) is not supported")
    if int(layer.get("num_hidden_layers") or 1) != 1:
        raise CheckpointError(
            f"config.json: num_hidden_layers {layer['num_hidden_layers']}: only one-layer "
            "EAGLE-3 drafters are supported"
        )
    hidden, heads = int(layer["hidden_size"]), int(layer["num_attention_heads"])
    target_hidden = config.get("target_hidden_size") or hidden
    if target_hidden != hidden:
        raise CheckpointError(
            f"config.json: target_hidden_size {target_hidden} differs from hidden_size {hidden}: not supported"
        )
    if layout == "eagle" and config.get("norm_output") is False:
        raise CheckpointError("config.json: norm_output: false (no final norm before the head) is not supported")
    vocab = int(layer.get("vocab_size") or vocab_size)
    if vocab != vocab_size:
        raise CheckpointError(f"config.json: vocab_size {vocab} is not the target's {vocab_size}")
    draft_vocab = int(config.get("draft_vocab_size") or vocab)
    kv_heads = int(layer.get("num_key_value_heads") or heads)
    head_dim = int(layer.get("head_dim") or hidden // heads)
    try:
        theta, scaling = rope_settings(SimpleNamespace(**layer))
    except ValueError as exc:
        raise CheckpointError(f"config.json: {str(exc).removeprefix('target: ')}") from None
    return DrafterConfig(
        hidden_size=hidden,
        heads=heads,
        intermediate_size=int(layer["intermediate_size"]),
        vocab_size=vocab,
        capture_layers=captured(config, target_layers),
        norm="post" if layout == "speculators" and config.get("norm_output") else "pre",
        fc_norm=bool(config.get("fc_norm")) or "fc_norm.0.weight" in weights,
        draft_vocab=None if draft_vocab == vocab else draft_vocab,
        rope_theta=theta,
        rope_scaling=scaling,
        rms_eps=float(layer.get("rms_norm_eps") or 1e-6),
        kv_heads=None if kv_heads == heads else kv_heads,
        head_dim=None if head_dim == hidden // heads else head_dim,
    )


def our_names(state: dict[str, torch.Tensor], layout: str) -> dict[str, torch.Tensor]:
    """The checkpoint's weights under specfleet's parameter names; unknown weights are an error."""
    prefix = PREFIX[layout]
    wanted = {f"{prefix}{theirs}": ours for ours, theirs in LAYER.items()}
    wanted.update({theirs: ours for ours, theirs in OUTSIDE.items()})
    wanted.update({f"fc_norm.{i}.weight": f"stream_norms.{i}.weight" for i in range(3)})
    wanted.update({"embed_tokens.weight": "embed.weight", "model.embed_tokens.weight": "embed.weight"})
    out, unknown = {}, []
    for name, tensor in state.items():
        if name in wanted:
            out[wanted[name]] = tensor
        elif not name.startswith(("verifier_", "rotary_emb")):  # never part of the drafter's function
            unknown.append(name)
    if unknown:
        raise CheckpointError(
            f"weights {sorted(unknown)[:4]} are not part of a one-layer EAGLE-3 drafter ({layout} layout)"
        )
    return out


def import_checkpoint(folder: str | Path, target_embedding: torch.Tensor, target_layers: int) -> Eagle3Drafter:
    """A drafter from an EAGLE-3 checkpoint folder in any of the three layouts; float32, eval mode.
    The embedding is the checkpoint's when it carries one, else the target's."""
    config, state = read_folder(folder)
    layout = layout_of(config)
    cfg = drafter_config(config, target_layers, target_embedding.shape[0], state)
    weights = our_names(state, layout)
    weights.setdefault("embed.weight", target_embedding)
    n_out = cfg.draft_vocab or cfg.vocab_size
    if "t2d" in weights and int(weights["t2d"].bool().sum()) != n_out:
        raise CheckpointError(
            f"{folder}: t2d marks {int(weights['t2d'].bool().sum())} target ids, not the draft vocabulary's {n_out}"
        )
    if "d2t" in weights and (
        weights["d2t"].shape != (n_out,)
        or not bool(((torch.arange(n_out) + weights["d2t"].long()) < cfg.vocab_size).all())
    ):
        raise CheckpointError(f"{folder}: d2t does not map {n_out} draft ids into the target's {cfg.vocab_size}")
    if "t2d" in weights and "d2t" not in weights:
        weights["d2t"] = weights["t2d"].nonzero().flatten() - torch.arange(n_out)
    weights.setdefault("d2t", torch.zeros(n_out, dtype=torch.long))
    if "t2d" not in weights:  # the covered target ids follow from the offsets
        t2d = torch.zeros(cfg.vocab_size, dtype=torch.bool)
        t2d[torch.arange(n_out) + weights["d2t"].long()] = True
        weights["t2d"] = t2d
    weights = {k: v.float() if v.is_floating_point() else v for k, v in weights.items()}
    weights["d2t"], weights["t2d"] = weights["d2t"].long(), weights["t2d"].bool()
    drafter = Eagle3Drafter(cfg)
    expected = drafter.state_dict()
    missing, extra = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
    if missing or extra:
        raise CheckpointError(
            f"{folder}: weights do not match config.json: missing {missing[:4]}, unexpected {extra[:4]}"
        )
    wrong = [
        f"{k} {tuple(weights[k].shape)} (config.json says {tuple(v.shape)})"
        for k, v in expected.items()
        if weights[k].shape != v.shape
    ]
    if wrong:
        raise CheckpointError(f"{folder}: weights do not match config.json: {'; '.join(wrong[:3])}")
    drafter.load_state_dict(weights, strict=True)
    return drafter.eval()
