"""The DFlash export holds every weight vLLM's DFlash drafter loads, under its names (no `model.`
prefix, no embedding or output head: vLLM takes the target's), and a config vLLM reads; read back
by those names, it computes the drafter's own logits."""

from __future__ import annotations

import json

import safetensors.torch
import torch

from pipeline.autotune.engines.registry import folder_block_size
from workers.drafters.dflash.export import export_dflash, names
from workers.drafters.dflash.model import DFlashConfig, DFlashDrafter
from workers.drafters.registry import family_of


def test_the_export_reads_back_into_the_same_drafter(tiny_target, tiny_dflash, tmp_path):
    target, _, _ = tiny_target
    drafter, _ = tiny_dflash
    folder = export_dflash(drafter, tmp_path / "dflash", dtype=torch.float32)
    config = json.loads((folder / "config.json").read_text())
    cfg = drafter.cfg
    assert config["architectures"] == ["DFlashDraftModel"] and config["model_type"] == "qwen3"
    assert config["dflash_config"] == {
        "mask_token_id": cfg.mask_token_id,
        "target_layer_ids": list(cfg.target_layer_ids),
        "use_aux_hidden_state": True,
        "causal": False,
    }
    assert (config["num_hidden_layers"], config["rope_theta"], config["vocab_size"]) == (
        cfg.layers,
        cfg.rope_theta,
        cfg.vocab_size,
    )
    assert config["max_position_embeddings"] == target.config.max_position_embeddings
    assert folder_block_size(str(folder)) == cfg.block_size  # what autotune sizes the engines' block by
    tensors = safetensors.torch.load_file(folder / "model.safetensors")
    assert set(tensors) == set(names(cfg.layers).values())
    assert not any(k.startswith("model.") or "embed" in k or "lm_head" in k for k in tensors)
    assert {f"layers.{cfg.layers - 1}.self_attn.k_norm.weight", "fc.weight", "hidden_norm.weight"} <= set(tensors)
    back = DFlashDrafter(DFlashConfig.from_dict(cfg.to_dict()))
    state = {ours: tensors[theirs] for ours, theirs in names(cfg.layers).items()}
    state["embed.weight"] = target.get_input_embeddings().weight.detach()
    state["lm_head.weight"] = target.get_output_embeddings().weight.detach()
    back.load_state_dict(state)
    first, anchors = torch.tensor([[5, 9]]), torch.tensor([3, 7])
    ctx = torch.randn(1, 12, cfg.hidden_size)
    with torch.no_grad():
        torch.testing.assert_close(
            back.eval().forward_blocks(first, anchors, ctx), drafter.forward_blocks(first, anchors, ctx)
        )


def test_the_family_exports_once_for_vllms_dflash_method(tiny_dflash, tmp_path):
    from pipeline.core.files import write_dir

    _, files = tiny_dflash
    checkpoint = write_dir(files, tmp_path / "checkpoint")
    family = family_of("dflash")
    folder, method = family.export(checkpoint, tmp_path / "out")
    assert method == "dflash" and (tmp_path / "out" / "config.json").is_file()
    stamp = (tmp_path / "out" / "model.safetensors").stat().st_mtime_ns
    assert family.export(checkpoint, tmp_path / "out")[0] == folder
    assert (tmp_path / "out" / "model.safetensors").stat().st_mtime_ns == stamp  # written once
