"""The select_depth job: the depth, the schedule and the tree for the primary curve."""

from __future__ import annotations

import dataclasses
import random

import pipeline.core.contracts as c
from pipeline.core.select import run
from pipeline.core.trees import rank_path
from pipeline.core.types import Curve
from tests.pipeline.core.test_tree_choice import _cost


def test_the_tree_is_weighed_against_the_chain_this_depth_choice_serves():
    """Sampled drafts from a drafter whose q is the target's p over three tokens, at T = 1: every
    draft is kept, so the chain of 3 yields 4 tokens a pass, while the target's token is the top
    guess a third of the time. The tree's chain is the depth choice's own, with its tokens."""
    rng = random.Random(9)
    paths = tuple(tuple(rank_path([rng.randrange(3) for _ in range(3)], 3) for _ in range(40)) for _ in range(12))
    curve = Curve(
        condition="default",
        temperature=1.0,
        num_chains=480,
        cond_accept=(1.0, 1.0, 1.0),
        survival=(1.0, 1.0, 1.0),
        accept_len=(1.0, 2.0, 3.0, 4.0),
    )
    measured = c.Measured(
        curves=(c.MeasuredCurve(curve=curve, per_prompt=(), walks=(), rank_paths=paths),), rank_topk=3
    )
    cost = dataclasses.replace(_cost(0.02), pass_ms=(1.0, 1.12, 1.24, 1.36))
    config = c.SelectDepthConfig(seed=0, target="t", drafter="d", cost_ratio=None, max_batch_size=1)
    selected = run(config, {"curve": measured, "cost": c.Profiled(cost=cost)}, num_gpus=0, progress=None)
    assert selected.choice.depth == 3 and selected.choice.tokens_per_pass == 4.0
    tree = selected.tree
    assert tree.chain_depth == 3 and tree.chain_decode_accept_len == 4.0
    assert tree.chain_speedup > tree.speedup and not tree.served


def _two_batch_sizes(max_batch_size: int):
    curve = Curve(
        condition="default",
        temperature=0.0,
        num_chains=100,
        cond_accept=(0.8, 0.8, 0.8),
        survival=(0.8, 0.64, 0.512),
        accept_len=(1.0, 1.8, 2.44, 2.952),
    )
    measured = c.Measured(curves=(c.MeasuredCurve(curve=curve, per_prompt=(), walks=()),))
    cost = dataclasses.replace(
        _cost(0.02, batch_sizes=(1, 4)),
        draft_ms_by_batch=(0.05, 0.3),
        verify_ms_by_batch=((1.0, 1.05, 1.1, 1.15), (1.0, 1.6, 2.2, 2.8)),
    )
    config = c.SelectDepthConfig(seed=0, target="t", drafter="d", cost_ratio=0.05, max_batch_size=max_batch_size)
    return run(config, {"curve": measured, "cost": c.Profiled(cost=cost)}, num_gpus=0, progress=None)


def test_a_schedule_says_where_its_measurements_end():
    """Depths measured at batch sizes 1 and 4: a schedule to 4 claims nothing more; one stretched to
    16 records that 5-16 carry the depth of 4 unmeasured, and autotune says so."""
    from pipeline.autotune.choice_row import choice_row, unmeasured_note

    measured = _two_batch_sizes(4)
    assert measured.batch_depths == {1: 3, 4: 0}
    assert measured.schedule == ((1, 1, 3), (2, 4, 0)) and measured.schedule_measured_to == 4
    assert "keep that depth unmeasured" not in unmeasured_note(choice_row(measured))
    stretched = _two_batch_sizes(16)
    assert stretched.schedule == ((1, 1, 3), (2, 16, 0)) and stretched.schedule_measured_to == 4
    assert "batch sizes 5-16 keep that depth unmeasured" in unmeasured_note(choice_row(stretched))


def test_the_schedule_ends_at_the_largest_profiled_batch_size_unless_told():
    from pipeline.core.settings import Cost

    assert Cost(batch_sizes=[1, 8, 32]).schedule_end == 32
    assert Cost(batch_sizes=[1, 8], max_batch_size=256).schedule_end == 256
    assert Cost().schedule_end == 1


def test_the_choice_records_how_a_block_drafter_drafted_and_autotune_reads_it():
    """The select job carries the DFlash rule into Selected and the row autotune reads (None elsewhere,
    read as whole blocks)."""
    from pipeline.autotune.choice_row import block_drafting_of, choice_row

    curve = Curve(
        condition="default",
        temperature=0.0,
        num_chains=10,
        cond_accept=(0.8, 0.8),
        survival=(0.8, 0.64),
        accept_len=(1.0, 1.8, 2.44),
    )
    measured = c.Measured(curves=(c.MeasuredCurve(curve=curve, per_prompt=(), walks=()),))
    inputs = {"curve": measured, "cost": c.Profiled(cost=_cost(0.02))}
    for rule, read in (("depth", "depth"), ("trained", "trained"), (None, "trained")):
        config = c.SelectDepthConfig(
            seed=0, target="t", drafter="d", cost_ratio=None, max_batch_size=1, block_drafting=rule
        )
        selected = run(config, inputs, num_gpus=0, progress=None)
        assert selected.block_drafting == rule and block_drafting_of(choice_row(selected)) == read
