"""DFlash training: random anchors inside the window, the block loss equal to a hand-computed one on a
toy case (position weights, the loss mask), and a trained drafter that reports every block position."""

from __future__ import annotations

import math

import torch

from tests.workers.decoding.test_chain import _tiny_llama
from workers.drafters.dflash.model import drafter_from_target
from workers.drafters.dflash.train import (
    block_loss,
    dflash_config_for,
    position_weights,
    random_anchors,
    rarest_token,
)
from workers.models.features import HeadRows, target_pass


def test_position_weights_decay_from_the_first_draft():
    torch.testing.assert_close(position_weights(4, 2.0), torch.tensor([1.0, math.exp(-0.5), math.exp(-1.0)]))
    assert torch.equal(position_weights(4, None), torch.ones(3))


def test_the_mask_is_the_rarest_token_of_the_training_text():
    assert rarest_token(torch.tensor([0, 1, 1, 2, 2, 3, 0, 4, 4, 4]), 5) == 3
    assert rarest_token(torch.tensor([0, 2, 2]), 5) == 1  # never seen, the lowest such id


def test_anchors_are_distinct_sorted_and_leave_room_for_context_and_block():
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        a = random_anchors(20, 5, 8, gen)
        assert len(set(a.tolist())) == 8 and torch.equal(a, torch.sort(a).values)
        assert int(a.min()) >= 1 and int(a.max()) <= 15
    assert random_anchors(7, 5, 8, gen).tolist() == [1, 2]  # as many as there are


@torch.no_grad()
def test_the_block_loss_is_the_weighted_soft_cross_entropy_by_hand():
    target = _tiny_llama(0, vocab=40)
    torch.manual_seed(3)
    drafter = drafter_from_target(target, dflash_config_for(target, layers=1, block_size=3, mask_token_id=39)).eval()
    ids = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(1))
    streams, logits = target_pass(target, ids, drafter.cfg.capture_layers, HeadRows(target).select(None))
    anchors, weights = torch.tensor([2, 6]), torch.tensor([1.0, 0.5])
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[1, 7] = False  # row 1's prediction at 7 (of token 8): block 1's position 2 carries no loss
    loss, agree = block_loss(drafter, ids, streams, logits, mask, anchors=anchors, weights=weights)
    q = drafter.forward_blocks(ids[:, anchors], anchors, drafter.context(streams))
    total = norm = 0.0
    for b in range(2):
        for j, a in enumerate(anchors.tolist()):
            for k in (1, 2):
                if not mask[b, a + k - 1]:
                    continue
                p = torch.softmax(logits[b, a + k - 1], -1)  # the target's distribution of token a + k
                ce = -(p * torch.log_softmax(q[b, j, k], -1)).sum()
                total, norm = total + weights[k - 1] * ce, norm + weights[k - 1]
    torch.testing.assert_close(loss, total / norm)
    assert len(agree) == 2


def test_a_trained_drafter_reports_every_block_position(tiny_target, tiny_dflash):
    from pipeline.core.model_settings import DFlashDrafterSpec
    from workers.drafters.dflash.train import train_dflash

    target, tokenizer, _ = tiny_target
    spec = DFlashDrafterSpec(name="d", kind="dflash", block_size=4, train={"steps": 2, "batch_size": 2, "seq_len": 32})
    _, metrics = train_dflash(target=target, tokenizer=tokenizer, spec=spec, seed=0, device=torch.device("cpu"))
    assert sorted(k for k in metrics if k.startswith("val_top1_step")) == [f"val_top1_step{s}" for s in range(3)]
    trained, _ = tiny_dflash
    untrained = drafter_from_target(target, trained.cfg)
    assert not torch.equal(trained.fc.weight, untrained.fc.weight)
