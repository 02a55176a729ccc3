"""Grouped-query targets (as real models are): the drafter takes its attention shape and rotary
rule from the target, drafts the same chains batched and incrementally, and the engine stays
lossless with it (greedy equality, the sampled distribution), through export and import too."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tests.workers.decoding.test_chain import V, check_sampled_distribution
from workers.decoding.chain import generate
from workers.drafters.chain.drafting import draft_all_chains
from workers.drafters.chain.proposer import ChainProposer
from workers.drafters.eagle3.export import export_eagle3
from workers.drafters.eagle3.layouts import import_checkpoint
from workers.drafters.eagle3.model import drafter_from_target
from workers.drafters.eagle3.train import drafter_config_for
from workers.models.features import target_pass
from workers.models.rope import inv_freq, rope_settings

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
    "rope_theta": 500000.0,
}


def _gqa_llama(seed: int, vocab: int = V) -> LlamaForCausalLM:
    """4 query heads over 2 key/value heads, a head size that is not hidden/heads, Llama-3.1 RoPE."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=12,
        max_position_embeddings=64,
        initializer_range=0.3,
        tie_word_embeddings=True,
        rope_scaling=dict(LLAMA3_ROPE),
        rope_theta=500000.0,
    )
    return LlamaForCausalLM(cfg).eval()


def _drafter(target, norm="pre", attention="standard", seed=1):
    cfg = drafter_config_for(target, norm=norm, fc_norm=False, fusion="tri", attention=attention)
    torch.manual_seed(seed)
    return drafter_from_target(target, cfg).eval()


def test_drafter_takes_the_targets_attention_shape_and_rotary_rule():
    target = _gqa_llama(0)
    drafter = _drafter(target)
    cfg = drafter.cfg
    assert (cfg.heads, cfg.num_kv_heads, cfg.dim_per_head) == (4, 2, 12)
    assert drafter.q_proj.out_features == 48 and drafter.k_proj.out_features == 24
    assert drafter.o_proj.in_features == 48
    assert cfg.rope_theta == 500000.0 and cfg.rope_scaling["rope_type"] == "llama3"
    # the frequencies are the target's own, scaling included
    ours = inv_freq(12, *rope_settings(target.config))
    theirs = target.model.rotary_emb.inv_freq.float()
    assert torch.allclose(ours, theirs, rtol=1e-6)
    plain = inv_freq(12, 500000.0)
    assert not torch.allclose(ours, plain)  # llama3 scaling slowed the long wavelengths
    # and rotation by them matches the target's own rotary embedding at every position
    pos = torch.arange(20)
    cos, _ = target.model.rotary_emb(torch.zeros(1, 20, 32), pos[None])
    ang = pos.float()[:, None] * ours[None, :]
    assert torch.allclose(torch.cat([ang.cos(), ang.cos()], -1), cos[0], atol=1e-5)


def test_unsupported_rope_scaling_is_refused_by_name():
    target = _gqa_llama(0)
    target.config.rope_scaling = {"rope_type": "yarn", "factor": 4.0}
    if hasattr(target.config, "rope_parameters"):
        target.config.rope_parameters = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}
    with pytest.raises(ValueError, match="rope_type 'yarn'"):
        drafter_config_for(target, norm="pre", fc_norm=False, fusion="tri")


@pytest.mark.parametrize("norm,attention", [("pre", "standard"), ("post", "gated")])
def test_gqa_drafter_batched_chains_equal_incremental_ones(norm, attention):
    target = _gqa_llama(0, vocab=40)
    drafter = _drafter(target, norm, attention)
    seq = torch.randint(0, 40, (1, 18), generator=torch.Generator().manual_seed(1))
    streams, _ = target_pass(target, seq, drafter.cfg.capture_layers)
    starts = list(range(1, 12))
    drafts = draft_all_chains(drafter, seq, streams, 4, 0.0, None, starts)[0]
    for n, c in enumerate(starts):
        proposer = ChainProposer(drafter)
        proposer.start(seq[0, : c + 2].tolist(), [s[:, : c + 1] for s in streams])
        assert proposer.propose(4, 0.0, None)[0] == drafts[n].tolist(), c


def test_greedy_speculative_decoding_with_a_gqa_target_is_the_targets_greedy_decode():
    target = _gqa_llama(0, vocab=40)
    prompt = torch.tensor([[1, 7, 3, 9]])
    reference, _ = generate(target, None, prompt, max_new=30, depth=0, temperature=0.0)
    identical = 0
    for norm in ("pre", "post"):
        proposer = ChainProposer(_drafter(target, norm))
        for depth in (1, 3, 5):
            out, accepted = generate(target, proposer, prompt, max_new=30, depth=depth, temperature=0.0)
            assert out == reference, (norm, depth)
            identical += sum(accepted)
    assert identical > 0  # some drafts were accepted, so the accepted path was exercised too


@pytest.mark.slow
def test_sampled_decoding_with_a_gqa_target_keeps_its_distribution():
    target = _gqa_llama(0)
    check_sampled_distribution(target, ChainProposer(_drafter(target, "post")))


def test_gqa_drafter_survives_export_and_import(tmp_path):
    target = _gqa_llama(0, vocab=40)
    drafter = _drafter(target)
    folder = export_eagle3(drafter, tmp_path / "eagle3", dtype=torch.float32)
    import json

    config = json.loads((folder / "config.json").read_text())
    assert (config["num_key_value_heads"], config["head_dim"]) == (2, 12)
    assert config["rope_scaling"]["rope_type"] == "llama3"
    back = import_checkpoint(folder, target.get_input_embeddings().weight, 4)
    assert back.cfg == drafter.cfg
    seq = torch.randint(0, 40, (1, 14), generator=torch.Generator().manual_seed(3))
    streams, _ = target_pass(target, seq, drafter.cfg.capture_layers)
    a = draft_all_chains(drafter, seq, streams, 3, 0.0, None, list(range(10)))[0]
    b = draft_all_chains(back, seq, streams, 3, 0.0, None, list(range(10)))[0]
    assert torch.equal(a, b)
    assert math.isclose(back.rope_freqs[-1].item(), drafter.rope_freqs[-1].item())


def test_rope_settings_the_drafter_cannot_follow_are_refused():
    from types import SimpleNamespace

    nested = SimpleNamespace(
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
        }
    )
    with pytest.raises(ValueError, match="per-layer-type rope_parameters"):
        rope_settings(nested)
    with pytest.raises(ValueError, match="partial_rotary_factor 0.5"):
        rope_settings(SimpleNamespace(rope_theta=1e4, partial_rotary_factor=0.5))
    theta, scaling = rope_settings(SimpleNamespace(rope_parameters=dict(LLAMA3_ROPE)))
    assert theta == 500000.0 and scaling["original_max_position_embeddings"] == 16
    assert isinstance(scaling["original_max_position_embeddings"], int)
