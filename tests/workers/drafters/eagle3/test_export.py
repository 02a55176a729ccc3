"""EAGLE-3 export: the engines' names, shapes and config keys, and a lossless round trip."""

from __future__ import annotations

import json

import pytest
import safetensors.torch
import torch

from workers.drafters.eagle3.export import export_eagle3
from workers.drafters.eagle3.layouts import import_checkpoint
from workers.drafters.eagle3.model import drafter_from_target
from workers.drafters.eagle3.train import drafter_config_for


@pytest.fixture()
def pre_norm_drafter(tiny_target):
    target, _, _ = tiny_target
    cfg = drafter_config_for(target, norm="pre", fc_norm=False, fusion="tri", draft_vocab=128)
    torch.manual_seed(0)
    drafter = drafter_from_target(target, cfg, torch.sort(torch.randperm(cfg.vocab_size)[:128]).values)
    with torch.no_grad():  # trained-looking weights; the embedding stays the target's, as engines use it
        for name, p in drafter.named_parameters():
            if name != "embed.weight":
                p.add_(torch.randn_like(p) * 0.02)
    return drafter.eval()


def test_layout_names_shapes_and_config(tmp_path, pre_norm_drafter):
    folder = export_eagle3(pre_norm_drafter, tmp_path / "eagle3", dtype=torch.bfloat16)
    config = json.loads((folder / "config.json").read_text())
    tensors = safetensors.torch.load_file(str(folder / "model.safetensors"))
    d, cfg = pre_norm_drafter.cfg.hidden_size, pre_norm_drafter.cfg
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["num_hidden_layers"] == 1
    assert config["draft_vocab_size"] == 128 and config["vocab_size"] == cfg.vocab_size
    assert config["eagle_aux_hidden_state_layer_ids"] == list(cfg.capture_layers)
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [k - 1 for k in cfg.capture_layers]
    assert tensors["midlayer.self_attn.q_proj.weight"].shape == (d, 2 * d)
    assert tensors["fc.weight"].shape == (d, 3 * d)
    assert tensors["lm_head.weight"].shape == (128, d) and tensors["lm_head.weight"].dtype == torch.bfloat16
    assert tensors["d2t"].dtype == torch.int64 and tensors["t2d"].dtype == torch.bool
    assert int(tensors["t2d"].sum()) == 128
    ids = torch.arange(128) + tensors["d2t"]  # target id = draft id + d2t[draft id]
    assert torch.equal(ids, pre_norm_drafter.draft_ids())
    assert not any(name.startswith(("model.", "embed")) for name in tensors)


def test_round_trip_computes_the_same_function(tmp_path, tiny_target, pre_norm_drafter):
    target, _, _ = tiny_target
    folder = export_eagle3(pre_norm_drafter, tmp_path / "eagle3", dtype=torch.float32)
    back = import_checkpoint(folder, target.get_input_embeddings().weight, target.config.num_hidden_layers)
    tokens = torch.randint(3, 300, (2, 12))
    g0 = torch.randn(2, 12, pre_norm_drafter.cfg.hidden_size)
    for a, b in zip(pre_norm_drafter.forward_steps(tokens, g0, 3), back.forward_steps(tokens, g0, 3)):
        assert torch.allclose(a.logits, b.logits, atol=1e-5)


@pytest.mark.parametrize(
    "switch,value,message",
    [
        ("norm", "post", "norm: post"),
        ("fc_norm", True, "fc_norm"),
        ("attention", "gated", "attention: gated"),
        ("fusion", "last", "fusion: last"),
    ],
)
def test_variants_engines_cannot_run_are_refused(tmp_path, tiny_target, switch, value, message):
    target, _, _ = tiny_target
    kwargs = {"norm": "pre", "fc_norm": False, "fusion": "tri", switch: value}
    drafter = drafter_from_target(target, drafter_config_for(target, **kwargs))
    with pytest.raises(ValueError, match=message):
        export_eagle3(drafter, tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_a_drafter_over_the_whole_vocabulary_has_no_vocabulary_maps(tmp_path, tiny_target):
    """vLLM builds no draft-to-target map when the draft vocabulary is the target's and refuses a
    checkpoint that holds one ('no module or parameter named draft_id_to_target_id', 0.32.0): the
    maps are left out, and reading the folder back gives the identity."""
    target, _, _ = tiny_target
    cfg = drafter_config_for(target, norm="pre", fc_norm=False, fusion="tri")
    drafter = drafter_from_target(target, cfg).eval()
    folder = export_eagle3(drafter, tmp_path / "eagle3", dtype=torch.float32)
    tensors = safetensors.torch.load_file(str(folder / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    assert config["draft_vocab_size"] == config["vocab_size"] and not {"d2t", "t2d"} & set(tensors)
    back = import_checkpoint(folder, target.get_input_embeddings().weight, target.config.num_hidden_layers)
    assert torch.equal(back.draft_ids(), torch.arange(cfg.vocab_size))
