"""The MTP head reads [norm(embedding); norm(target's last hidden)] through one projection and one
decoder layer, and predicts through the target's own final norm and output head, frozen."""

from __future__ import annotations

import torch

from tests.workers.decoding.test_chain import _tiny_llama
from workers.drafters.mtp.model import head_from_target
from workers.drafters.mtp.train import mtp_config_for


@torch.no_grad()
def test_the_head_predicts_through_the_targets_frozen_norm_and_output_head():
    target = _tiny_llama(0, vocab=40)
    torch.manual_seed(1)
    head = head_from_target(target, mtp_config_for(target, norm="pre"))
    for name, theirs in (
        ("embed", target.get_input_embeddings()),
        ("final_norm", target.model.norm),
        ("lm_head", target.get_output_embeddings()),
    ):
        ours = getattr(head, name)
        assert torch.equal(ours.weight, theirs.weight) and not ours.weight.requires_grad, name
    trained = {n for n, p in head.named_parameters() if p.requires_grad}
    assert {"proj.weight", "enorm.weight", "hnorm.weight", "q_proj.weight", "down_proj.weight"} <= trained
    # with the layer's two residual branches silenced, the output is the target's head on the projection
    head.o_proj.weight.zero_()
    head.down_proj.weight.zero_()
    tokens, g = torch.tensor([[3, 7, 1]]), torch.randn(1, 3, 32)
    (out,) = head.forward_steps(tokens, g, 1)
    x = head.proj(torch.cat([head.enorm(target.get_input_embeddings()(tokens)), head.hnorm(g)], dim=-1))
    expected = target.get_output_embeddings()(target.model.norm(x))
    torch.testing.assert_close(out.logits, expected)


@torch.no_grad()
def test_a_post_norm_head_hands_on_the_normed_state_and_a_pre_norm_head_the_raw_one():
    """Step s >= 1 reads the head's own output at the position before: raw (pre) or after the final
    norm (post). Two heads with the same weights agree at step 0 and differ only in what they hand on."""
    target = _tiny_llama(0, vocab=40)
    torch.manual_seed(1)
    pre = head_from_target(target, mtp_config_for(target, norm="pre"))
    post = head_from_target(target, mtp_config_for(target, norm="post"))
    post.load_state_dict(pre.state_dict())
    tokens, g = torch.tensor([[3, 7, 1, 9]]), torch.randn(1, 4, 32) * 5
    pre_steps, post_steps = pre.forward_steps(tokens, g, 2), post.forward_steps(tokens, g, 2)
    torch.testing.assert_close(pre_steps[0].logits, post_steps[0].logits)
    torch.testing.assert_close(post_steps[0].chain, pre.final_norm(pre_steps[0].chain))
    assert not torch.allclose(pre_steps[1].logits, post_steps[1].logits)
