"""The DFlash block drafter: one pass over many blocks computes what decoding with a context cache
computes, each block sees only the context before its anchor and never another block, and the
target's embedding and output head are shared and frozen."""

from __future__ import annotations

import pytest
import torch

from tests.workers.decoding.test_chain import _tiny_llama
from workers.drafters.dflash.model import drafter_from_target
from workers.drafters.dflash.train import dflash_config_for
from workers.drafters.target_layers import capture_layers, spread_layer_ids
from workers.models.features import target_pass

MASK = 39  # a token of the 40-token vocabulary


def _drafter(layers=2, block_size=4):
    target = _tiny_llama(0, vocab=40)
    torch.manual_seed(3)
    cfg = dflash_config_for(target, layers=layers, block_size=block_size, mask_token_id=MASK)
    return target, drafter_from_target(target, cfg).eval()


def _text(target, drafter, length=14):
    ids = torch.randint(0, 40, (1, length), generator=torch.Generator().manual_seed(1))
    streams, _ = target_pass(target, ids, drafter.cfg.capture_layers)
    return ids, streams


def test_the_default_layers_spread_over_the_target():
    assert spread_layer_ids(36, 1) == (18,)
    assert spread_layer_ids(36, 5) == (1, 9, 17, 25, 33)  # DFlash's Qwen3-8B drafter reads these
    assert capture_layers(36, "spread5") == (2, 10, 18, 26, 34)  # layer i's output: hidden_states[i + 1]
    assert capture_layers(36, "spread5", (3, 4)) == (3, 4)


@torch.no_grad()
def test_one_pass_over_many_blocks_equals_decoding_with_a_context_cache():
    target, drafter = _drafter()
    ids, streams = _text(target, drafter)
    ctx = drafter.context(streams)
    anchors = torch.tensor([1, 4, 5, 9])
    batched = drafter.forward_blocks(ids[:, anchors], anchors, ctx)[0]  # [J, S, V]
    for j, a in enumerate(anchors.tolist()):
        half = a // 2  # the cache built in two pieces, as decoding extends it
        cache = drafter.extend_context(None, ctx[:, :half], 0)
        cache = drafter.extend_context(cache, ctx[:, half:a], half)
        alone = drafter.draft_block(cache, ids[:, a], a)[0]
        torch.testing.assert_close(batched[j], alone, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_a_shorter_block_is_the_same_layers_over_fewer_masks():
    """[x_a, MASK x k] as engines draft a depth k below the trained block: batched equals cached, a
    block of every size differs from the trained block's first positions (the masks it no longer
    sees), and a size past the block or below 2 is refused."""
    target, drafter = _drafter()
    ids, streams = _text(target, drafter)
    ctx = drafter.context(streams)
    anchors = torch.tensor([4, 9])
    whole = drafter.forward_blocks(ids[:, anchors], anchors, ctx)[0]  # [J, S, V]
    S = drafter.cfg.block_size
    for size in range(2, S):
        short = drafter.forward_blocks(ids[:, anchors], anchors, ctx, size)[0]
        assert short.shape[1] == size
        assert not torch.allclose(short, whole[:, :size], atol=1e-4)
        for j, a in enumerate(anchors.tolist()):
            cache = drafter.extend_context(None, ctx[:, :a], 0)
            alone = drafter.draft_block(cache, ids[:, a], a, size)[0]
            torch.testing.assert_close(short[j], alone, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(drafter.forward_blocks(ids[:, anchors], anchors, ctx, S)[0], whole)
    for bad in (1, S + 1):
        with pytest.raises(ValueError, match="2 to block_size"):
            drafter.forward_blocks(ids[:, anchors], anchors, ctx, bad)


@torch.no_grad()
def test_a_block_sees_the_context_before_its_anchor_and_no_other_block():
    target, drafter = _drafter()
    ids, streams = _text(target, drafter)
    ctx = drafter.context(streams)
    anchors = torch.tensor([3, 8])
    base = drafter.forward_blocks(ids[:, anchors], anchors, ctx)[0]
    later = ctx.clone()
    later[:, 3:] += torch.randn_like(later[:, 3:])  # everything from the first anchor on
    moved = drafter.forward_blocks(ids[:, anchors], anchors, later)[0]
    torch.testing.assert_close(moved[0], base[0])  # block 0 reads positions < 3 only
    assert not torch.allclose(moved[1], base[1])  # block 1 reads positions < 8
    other = ids[:, anchors].clone()
    other[0, 1] = (other[0, 1] + 1) % 40  # the second block's first token
    swapped = drafter.forward_blocks(other, anchors, ctx)[0]
    torch.testing.assert_close(swapped[0], base[0])
    assert not torch.allclose(swapped[1, 1:], base[1, 1:])  # its masked positions read their first token


@torch.no_grad()
def test_the_block_attends_both_ways():
    """No causal mask inside the block: a change at position 2 of the block's input moves position 1's
    output."""
    target, drafter = _drafter(layers=1, block_size=3)
    ids, streams = _text(target, drafter)
    cache = drafter.extend_context(None, drafter.context([s[:, :6] for s in streams]), 0)
    x = drafter._embed_block(ids[:, 6:7])
    moved = x.clone()
    moved[:, 2] += 1.0
    layer, (k, v) = drafter.layers[0], cache[0]
    pos = torch.arange(6, 9)
    a = layer(x, pos, k, v, None, drafter.rope_freqs)
    b = layer(moved, pos, k, v, None, drafter.rope_freqs)
    assert not torch.allclose(a[:, 1], b[:, 1])


def test_the_target_embedding_and_head_are_shared_and_frozen():
    target, drafter = _drafter()
    assert torch.equal(drafter.embed.weight, target.get_input_embeddings().weight)
    assert torch.equal(drafter.lm_head.weight, target.get_output_embeddings().weight)
    assert not drafter.embed.weight.requires_grad and not drafter.lm_head.weight.requires_grad
    assert drafter.fc.weight.requires_grad
    block = drafter._embed_block(torch.tensor([[5, 7]]))[0]  # two blocks of 4: the first token, then masks
    rows = target.get_input_embeddings().weight
    assert torch.equal(block[0], rows[5]) and torch.equal(block[4], rows[7])
    assert all(torch.equal(block[i], rows[MASK]) for i in (1, 2, 3, 5, 6, 7))  # the target's own row


def test_a_block_of_one_token_is_refused():
    target = _tiny_llama(0, vocab=40)
    with pytest.raises(ValueError, match="block_size 1"):
        drafter_from_target(target, dflash_config_for(target, layers=1, block_size=1, mask_token_id=MASK))
    with pytest.raises(ValueError, match="mask_token_id 40"):
        drafter_from_target(target, dflash_config_for(target, layers=1, block_size=4, mask_token_id=40))
