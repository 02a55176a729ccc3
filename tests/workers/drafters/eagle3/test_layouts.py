"""EAGLE-3 checkpoints from other trainers: each layout, written here as that project writes it
(names, config fields, where the captured layers are kept), reads back into a drafter that
computes the same function; what the drafter cannot compute is refused by name."""

from __future__ import annotations

import json
import re

import pytest
import safetensors.torch
import torch
from transformers import LlamaConfig

from tests.workers.models.test_gqa import _gqa_llama
from workers.drafters.eagle3.export import export_speculators
from workers.drafters.eagle3.layouts import CheckpointError, import_checkpoint
from workers.drafters.eagle3.model import drafter_from_target
from workers.drafters.eagle3.train import drafter_config_for

LAYER_NAMES = {  # specfleet's name -> the name both EAGLE's and SpecForge's Llama layer use
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


def _trained_looking(target, draft_vocab=None, seed=0):
    cfg = drafter_config_for(target, norm="pre", fc_norm=False, fusion="tri", draft_vocab=draft_vocab)
    torch.manual_seed(seed)
    ids = torch.sort(torch.randperm(cfg.vocab_size)[:draft_vocab]).values if draft_vocab else None
    drafter = drafter_from_target(target, cfg, ids)
    with torch.no_grad():
        for name, p in drafter.named_parameters():
            if name != "embed.weight":
                p.add_(torch.randn_like(p) * 0.05)
    return drafter.eval()


def _weights(drafter, prefix: str, embed: bool) -> dict[str, torch.Tensor]:
    s = drafter.state_dict()
    out = {prefix + theirs: s[ours] for ours, theirs in LAYER_NAMES.items()}
    out.update(
        {"fc.weight": s["fc.weight"], "norm.weight": s["final_norm.weight"], "lm_head.weight": s["lm_head.weight"]}
    )
    if drafter.cfg.draft_vocab:
        out.update({"d2t": s["d2t"], "t2d": s["t2d"]})
    if embed:
        out["embed_tokens.weight"] = s["embed.weight"]
    return {k: v.clone().contiguous() for k, v in out.items()}


def _llama_fields(drafter) -> dict:
    c = drafter.cfg
    return {
        "hidden_size": c.hidden_size,
        "num_attention_heads": c.heads,
        "num_key_value_heads": c.num_kv_heads,
        "intermediate_size": c.intermediate_size,
        "hidden_act": "silu",
        "num_hidden_layers": 1,
        "rms_norm_eps": c.rms_eps,
        "max_position_embeddings": 2048,
        "vocab_size": c.vocab_size,
    }


def write_eagle_authors(drafter, folder):
    """As SafeAILab/EAGLE's training saves it: a flat Llama config plus draft_vocab_size (no captured
    layers, no rope_theta or head_dim when they are Llama's defaults), pytorch_model.bin, `midlayer.`,
    no embedding."""
    folder.mkdir()
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        **_llama_fields(drafter),
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "draft_vocab_size": drafter.cfg.draft_vocab or drafter.cfg.vocab_size,
    }
    (folder / "config.json").write_text(json.dumps(config))
    torch.save(_weights(drafter, "midlayer.", embed=False), folder / "pytorch_model.bin")
    return folder


def write_specforge(drafter, folder):
    """As SpecForge saves it: the same names in model.safetensors, head_dim and rope settings in the
    flat config, the captured layers nested under eagle_config counted as layer outputs."""
    folder.mkdir()
    c = drafter.cfg
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        **_llama_fields(drafter),
        "head_dim": c.dim_per_head,
        "rope_theta": c.rope_theta,
        "rope_scaling": c.rope_scaling,
        "draft_vocab_size": c.draft_vocab or c.vocab_size,
        "eagle_config": {
            "use_aux_hidden_state": True,
            "eagle_aux_hidden_state_layer_ids": [k - 1 for k in c.capture_layers],
        },
    }
    (folder / "config.json").write_text(json.dumps(config))
    safetensors.torch.save_file(_weights(drafter, "midlayer.", embed=False), str(folder / "model.safetensors"))
    return folder


def write_speculators(drafter, folder):
    """As vllm-project/speculators saves it: the layer's settings nested and reduced to what differs
    from transformers' LlamaConfig defaults, `layers.0.`, the embedding kept, captured layers on top."""
    folder.mkdir()
    c = drafter.cfg
    full = {
        **_llama_fields(drafter),
        "head_dim": c.dim_per_head,
        "rope_theta": c.rope_theta,
        "rope_scaling": c.rope_scaling,
    }
    defaults = LlamaConfig().to_dict()
    layer = {"model_type": "llama", **{k: v for k, v in full.items() if defaults.get(k, object()) != v}}
    config = {
        "speculators_model_type": "eagle3",
        "architectures": ["Eagle3Speculator"],
        "transformer_layer_config": layer,
        "draft_vocab_size": c.draft_vocab or c.vocab_size,
        "norm_before_residual": False,
        "target_hidden_size": None,
        "eagle_aux_hidden_state_layer_ids": list(c.capture_layers),
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
            "verifier": {"name_or_path": "t", "architectures": ["LlamaForCausalLM"]},
        },
    }
    (folder / "config.json").write_text(json.dumps(config))
    safetensors.torch.save_file(_weights(drafter, "layers.0.", embed=True), str(folder / "model.safetensors"))
    return folder


WRITERS = {"eagle": write_eagle_authors, "specforge": write_specforge, "speculators": write_speculators}


def _same_function(a, b):
    tokens = torch.randint(0, a.cfg.vocab_size, (2, 10), generator=torch.Generator().manual_seed(5))
    g0 = torch.randn(2, 10, a.cfg.hidden_size, generator=torch.Generator().manual_seed(6))
    for x, y in zip(a.forward_steps(tokens, g0, 3), b.forward_steps(tokens, g0, 3)):
        assert torch.allclose(x.logits, y.logits, atol=1e-5)


@pytest.mark.parametrize("layout", WRITERS)
def test_each_layout_reads_back_as_the_same_drafter(tmp_path, tiny_target, layout):
    target = tiny_target[0]
    drafter = _trained_looking(target, draft_vocab=96)
    folder = WRITERS[layout](drafter, tmp_path / layout)
    back = import_checkpoint(folder, target.get_input_embeddings().weight, target.config.num_hidden_layers)
    assert back.cfg.capture_layers == drafter.cfg.capture_layers and back.cfg.draft_vocab == 96
    assert torch.equal(back.draft_ids(), drafter.draft_ids())
    _same_function(drafter, back)


@pytest.mark.parametrize("layout", ["specforge", "speculators"])
def test_grouped_heads_head_dim_and_llama3_rope_carry_over(tmp_path, layout):
    target = _gqa_llama(0, vocab=40)
    drafter = _trained_looking(target)
    back = import_checkpoint(WRITERS[layout](drafter, tmp_path / layout), target.get_input_embeddings().weight, 4)
    assert (back.cfg.num_kv_heads, back.cfg.dim_per_head, back.cfg.rope_scaling["rope_type"]) == (2, 12, "llama3")
    assert back.cfg == drafter.cfg
    _same_function(drafter, back)


def test_speculators_export_round_trip(tmp_path, tiny_target):
    target = tiny_target[0]
    drafter = _trained_looking(target, draft_vocab=96)
    folder = export_speculators(drafter, tmp_path / "spec", verifier="org/target", dtype=torch.float32)
    config = json.loads((folder / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3" and config["transformer_layer_config"]["model_type"] == "llama"
    assert config["speculators_config"]["verifier"]["name_or_path"] == "org/target"
    assert config["eagle_aux_hidden_state_layer_ids"] == list(drafter.cfg.capture_layers)
    names = set(safetensors.torch.load_file(str(folder / "model.safetensors")))
    assert "layers.0.self_attn.q_proj.weight" in names and not any(n.startswith("midlayer.") for n in names)
    _same_function(
        drafter, import_checkpoint(folder, target.get_input_embeddings().weight, target.config.num_hidden_layers)
    )


def test_what_the_drafter_cannot_compute_is_refused_by_name(tmp_path, tiny_target):
    target = tiny_target[0]
    emb, layers = target.get_input_embeddings().weight, target.config.num_hidden_layers
    drafter = _trained_looking(target)

    def broken(name, change):
        folder = write_speculators(drafter, tmp_path / name)
        config = json.loads((folder / "config.json").read_text())
        change(config)
        (folder / "config.json").write_text(json.dumps(config))
        return folder

    cases = [
        ("residual", lambda c: c.update(norm_before_residual=True), "norm_before_residual: true"),
        ("layers", lambda c: c["transformer_layer_config"].update(num_hidden_layers=2), "num_hidden_layers 2"),
        ("qwen", lambda c: c["transformer_layer_config"].update(model_type="qwen3"), "only Llama decoder layers"),
        ("ids", lambda c: c.update(eagle_aux_hidden_state_layer_ids=[1, 2, 99]), "captured layers [1, 2, 99]"),
        ("vocab", lambda c: c["transformer_layer_config"].update(vocab_size=7), "vocab_size 7"),
    ]
    for name, change, message in cases:
        with pytest.raises(CheckpointError, match=re.escape(message)):
            import_checkpoint(broken(name, change), emb, layers)
    folder = write_speculators(drafter, tmp_path / "extra")
    weights = safetensors.torch.load_file(str(folder / "model.safetensors"))
    safetensors.torch.save_file(
        {**weights, "layers.1.mlp.up_proj.weight": torch.zeros(2, 2)}, str(folder / "model.safetensors")
    )
    with pytest.raises(CheckpointError, match="layers.1.mlp.up_proj.weight"):
        import_checkpoint(folder, emb, layers)
    folder = write_specforge(drafter, tmp_path / "truncated")
    blob = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(CheckpointError, match="model.safetensors: cannot read the drafter's weights"):
        import_checkpoint(folder, emb, layers)


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.long
def test_checkpoints_in_each_layout_run_through_specfleet_to_stored_curves(tmp_path, tiny_target):
    """`path:` drafters in a spec: no training job, each layout measured and its curve stored."""
    import yaml

    from db.store import Store
    from tests.integration.test_end_to_end import specfleet

    model, tokenizer, _ = tiny_target
    target = tmp_path / "target"
    model.save_pretrained(target, safe_serialization=True)
    tokenizer.save_pretrained(target)
    drafter = _trained_looking(model, draft_vocab=96)
    spec = {
        "name": "theirs",
        "targets": [{"name": "t", "hf": str(target), "dtype": "float32"}],
        "drafters": [
            {"name": layout, "kind": "eagle3", "path": str(write(drafter, tmp_path / layout))}
            for layout, write in WRITERS.items()
        ],
        "evaluation": {"max_depth": 2, "num_prompts": 2, "prompt_len": 12, "continuation_len": 4, "tree_topk": 0},
        "cost": {"context_len": 8, "warmup": 0, "repeats": 2, "cost_ratio": 0.01, "tree_budget": 0},
    }
    (tmp_path / "theirs.yaml").write_text(yaml.safe_dump(spec))
    done = specfleet("run", "theirs.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    with Store(f"sqlite:///{tmp_path / '.specfleet' / 'specfleet.db'}") as store:
        kinds = {j["kind"] for j in store.jobs()}
        assert "train_drafter" not in kinds
        curves = {layout: [r["depth"] for r in store.curves(target="t", drafter=layout)] for layout in WRITERS}
        # the drafter's own hidden states along its chains: equal only if every layout loaded the same weights
        rms = {
            layout: [round(r["value"], 4) for r in store.diagnostics(target="t", drafter=layout) if r["name"] == "rms"]
            for layout in WRITERS
        }
    assert all(v == [1, 2] for v in curves.values()), curves
    assert len(rms["eagle"]) == 2 and rms["eagle"] == rms["specforge"] == rms["speculators"], rms
    spec["drafters"][0]["norm"] = "post"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(spec))
    bad = specfleet("validate", "bad.yaml", cwd=tmp_path)
    assert bad.returncode == 2 and "drafters[0]: path: the checkpoint sets its own variant" in bad.stderr
