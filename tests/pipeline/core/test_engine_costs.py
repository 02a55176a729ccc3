"""specfleet's cost table against the serving engine's clock, on a serving check's sweep
(pipeline/core/engine_costs.py): both iteration costs by depth, and the depth each chooses with
specfleet's curve, judged by the engine's own tokens/s."""

from __future__ import annotations

import pytest

from pipeline.core import contracts as c
from pipeline.core.engine_costs import cost_comparison, engine_cost_profile, iteration_ms

CURVE = (1.0, 1.8, 2.3, 2.5)  # specfleet's tokens per pass at k = 0..3


def _point(k: int, *, predicted: float, measured: float, engine_accept: float, b: int = 1) -> c.ServedPoint:
    return c.ServedPoint(
        depth=k,
        batch_size=b,
        tokens_per_s=50.0 * measured,
        measured_speedup=measured,
        predicted_speedup=predicted,
        accept_len=engine_accept,
        curve_accept_len=CURVE[k],
        accepted_per_pos=(),
        depth_run=float(k),
        greedy_equal=True,
        seconds=1.0,
        tokens=64,
    )


def _check(sweep, chosen) -> c.ServingCheck:
    return c.ServingCheck(
        engine="vllm 0.32.0",
        speculative_config="x",
        condition="default",
        temperature=0.0,
        hardware="cpu",
        cost_hardware="cpu",
        sweep=tuple(sweep),
        chosen=tuple(chosen),
        best_depth={},
        chosen_vs_best={},
        tolerance=0.05,
        passed=True,
        problems=(),
    )


def test_the_engines_dearer_iterations_choose_a_shallower_depth_that_it_measures_faster():
    # specfleet timed a deep iteration cheaply (2.3 / 1.15 = 2.0 plain steps at k = 2); the engine's
    # clock says 2.2 / 0.88 = 2.5 there, and its fastest depth is 1
    sweep = [
        _point(0, predicted=1.0, measured=1.0, engine_accept=1.0),
        _point(1, predicted=1.5, measured=1.2, engine_accept=1.75),
        _point(2, predicted=1.15, measured=0.88, engine_accept=2.2),
        _point(3, predicted=1.0, measured=0.7, engine_accept=2.45),
    ]
    chosen = [_point(2, predicted=1.55, measured=0.9, engine_accept=2.2)]
    (cmp,) = cost_comparison(_check(sweep, chosen))
    assert cmp.depths == (0, 1, 2, 3) and cmp.ours[0] == cmp.engine[0] == 1.0
    assert cmp.ours[1] == pytest.approx(1.8 / 1.5) and cmp.engine[1] == pytest.approx(1.75 / 1.2)
    assert cmp.ours[2] == pytest.approx(2.0) and cmp.engine[2] == pytest.approx(2.5)
    # with the engine's costs specfleet's curve picks k = 1: 1.8 / 1.458 = 1.23 beats 2.3 / 2.5 = 0.92
    assert (cmp.ours_depth, cmp.engine_depth) == (2, 1)
    assert cmp.engine_share == 1.0 and cmp.ours_share == pytest.approx(0.88 / 1.2)


def test_each_batch_size_is_compared_on_its_own_and_a_depth_the_sweep_missed_is_left_out():
    sweep = [
        _point(k, predicted=1.0 + 0.1 * k, measured=1.0 + 0.05 * k, engine_accept=CURVE[k], b=b)
        for b in (1, 4)
        for k in (0, 1, 2)
    ]
    chosen = [
        _point(2, predicted=1.2, measured=1.1, engine_accept=2.3, b=1),
        _point(3, predicted=1.2, measured=1.1, engine_accept=2.5, b=4),
    ]  # k = 3 was not swept at batch 4
    cmps = cost_comparison(_check(sweep, chosen))
    assert [x.batch_size for x in cmps] == [1]
    assert cmps[0].engine_depth == 2 and cmps[0].ours_share == cmps[0].engine_share == 1.0


def _batch(b: int, seconds: float, k: int, accepted_share: float = 0.5) -> dict:
    """An engine answer's batch: 30 tokens per sequence; at depth k each draft accepts a share of k."""
    tokens = 30 * b
    accept_len = 1 + accepted_share * k
    drafts = round(tokens / accept_len) if k else 0
    return {
        "batch_size": b,
        "seconds": seconds,
        "tokens": tokens,
        "drafts": drafts,
        "draft_tokens": drafts * k,
        "accepted": round((accept_len - 1) * drafts),
    }


def test_the_engines_clock_becomes_a_cost_table_of_whole_iterations():
    # plain: 30 tokens in 1 s at batch size 1 (33.3 ms an iteration); 8 sequences in 2 s at batch 8
    answers = [
        {"batches": [_batch(1, 1.0, 0), _batch(8, 2.0, 0)]},
        {"batches": [_batch(1, 0.8, 1), _batch(8, 2.4, 1)]},
        {"batches": [_batch(1, 0.75, 2), _batch(8, 3.2, 2)]},
    ]
    cost = engine_cost_profile(answers, hardware="cpu 2t x1 float32", timed_by="vllm 0.32.0")
    assert cost.timed_by == "vllm 0.32.0" and cost.batch_sizes == (1, 8)
    assert iteration_ms(answers[0]["batches"][0]) == pytest.approx(1000 / 30)
    # depth 1 accepts 1.5 tokens an iteration: 30 / 1.5 = 20 iterations in 0.8 s
    assert cost.pass_ms[1] == pytest.approx(40.0)
    assert cost.pass_ms == cost.verify_ms_by_batch[0] and cost.decode_ms == cost.pass_ms[0]
    assert cost.draft_ms_by_batch == (0.0, 0.0) and cost.draft_ms > 0
    # the depth choice's batch-size model on it is the engine's own measured speedup
    from pipeline.core.choice import batch_speedup

    speedups = batch_speedup((1.0, 1.5, 2.0), draft_ms=0.0, verify_ms=cost.verify_ms_by_batch[1])
    assert speedups == pytest.approx([1.0, 2.0 / 2.4, 2.0 / 3.2], rel=1e-3)
