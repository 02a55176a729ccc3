"""The acceptance and speedup maths against closed forms (constant alpha, Leviathan's theorem)."""

from __future__ import annotations

import math

import pytest

from pipeline.core.acceptance import (
    accept_len_from_survival,
    closed_form_accept_len,
    cond_from_survival,
    curve_from_accepted,
    curve_from_sampled,
    survival_from_cond,
)
from pipeline.core.choice import choose_depth, curve_speedup, leviathan_speedup


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.62, 0.9, 0.99])
@pytest.mark.parametrize("k", [0, 1, 2, 5, 12])
def test_constant_alpha_accept_len_matches_closed_form(alpha, k):
    survival = survival_from_cond([alpha] * k)
    assert accept_len_from_survival(survival)[k] == pytest.approx(closed_form_accept_len(alpha, k), rel=1e-12)


def test_closed_form_values():
    assert closed_form_accept_len(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert closed_form_accept_len(1.0, 4) == 5.0


@pytest.mark.parametrize("alpha,c", [(0.8, 0.05), (0.6, 0.2), (0.9, 0.5)])
def test_curve_speedup_is_leviathan_for_constant_alpha(alpha, c):
    acc = accept_len_from_survival(survival_from_cond([alpha] * 10))
    ours = curve_speedup(acc, c)
    for k in range(11):
        expected = (1 - alpha ** (k + 1)) / ((1 - alpha) * (k * c + 1))
        assert ours[k] == pytest.approx(expected, rel=1e-12)
        assert leviathan_speedup(alpha, k, c) == pytest.approx(expected, rel=1e-12)


def test_choose_depth_is_argmax_of_leviathan():
    alpha, c = 0.8, 0.1
    from pipeline.core.types import Curve

    surv = survival_from_cond([alpha] * 16)
    curve = Curve("default", 0.0, 100, tuple([alpha] * 16), tuple(surv), tuple(accept_len_from_survival(surv)))
    choice = choose_depth(curve, c)
    brute = max(range(17), key=lambda k: leviathan_speedup(alpha, k, c))
    assert choice.depth == brute
    assert choice.speedup == pytest.approx(leviathan_speedup(alpha, brute, c))
    assert choice.accept_len == pytest.approx(closed_form_accept_len(alpha, brute))


def test_choose_depth_zero_when_drafting_costs_more_than_it_gains():
    from pipeline.core.types import Curve

    surv = survival_from_cond([0.2] * 4)
    curve = Curve("default", 0.0, 10, (0.2,) * 4, tuple(surv), tuple(accept_len_from_survival(surv)))
    assert choose_depth(curve, 1.0).depth == 0
    with pytest.raises(ValueError):
        choose_depth(curve, 0.0)


def test_curve_from_accepted_pools_over_chains():
    accepted = [0, 1, 3, 3, 2]
    curve = curve_from_accepted(accepted, 3, condition="default", temperature=0.0)
    assert curve.survival == pytest.approx((4 / 5, 3 / 5, 2 / 5))
    assert curve.cond_accept == pytest.approx((4 / 5, 3 / 4, 2 / 3))
    # pooled accept_len(k) = mean over chains of (1 + min(accepted, k))
    for k in range(4):
        assert curve.accept_len[k] == pytest.approx(sum(1 + min(a, k) for a in accepted) / 5)
    with pytest.raises(ValueError):
        curve_from_accepted([4], 3, condition="default", temperature=0.0)


def test_curve_from_sampled_uses_path_ratios_then_expected_last_step():
    ratios = [[1.0, 0.5], [0.2, 1.0]]
    alphas = [[0.6, 0.5], [0.4, 0.9]]
    curve = curve_from_sampled(ratios, alphas, condition="default", temperature=1.0)
    assert curve.survival == pytest.approx(((0.6 + 0.4) / 2, (1.0 * 0.5 + 0.2 * 0.9) / 2))
    assert math.prod(curve.cond_accept) == pytest.approx(curve.survival[-1])


def test_curve_from_sampled_is_unbiased_on_a_two_token_example():
    """Two tokens, p = (1, 0) at step 1 then certain acceptance; q = (0.5, 0.5) at step 1.

    True survival[2] = P(draft 1 accepted) * 1 = 0.5. Averaging prod(alpha) over paths gives
    0.5 * 1 for the accepted path and 0.5 * (alpha_2 of the rejected path) otherwise; using the
    path's acceptance ratio removes the rejected path's contribution.
    """
    # path A drafts token 0: ratio min(1, 1/0.5) = 1; path B drafts token 1: ratio 0
    ratios = [[1.0, 1.0], [0.0, 1.0]]
    alphas = [[0.5, 1.0], [0.5, 0.2]]
    curve = curve_from_sampled(ratios, alphas, condition="default", temperature=1.0)
    assert curve.survival == pytest.approx((0.5, 0.5))


def test_cond_from_survival_round_trip():
    cond = [0.9, 0.7, 0.0, 0.5]
    assert cond_from_survival(survival_from_cond(cond)) == pytest.approx([0.9, 0.7, 0.0, 0.0])


def _per_prompt(accepted_by_prompt, depth):
    rows = []
    for accepted in accepted_by_prompt:
        c = curve_from_accepted(accepted, depth, condition="default", temperature=0.0)
        rows.append([len(accepted), *(s * len(accepted) for s in c.survival)])
    return rows


def test_bootstrap_interval_covers_the_pooled_value_and_tightens_with_data():
    from pipeline.core.choice import bootstrap_accept_len

    prompts = [[0, 1, 2, 3, 3], [1, 1, 0, 2, 3], [3, 3, 3, 2, 1], [0, 0, 1, 0, 2]]
    pooled = curve_from_accepted([a for p in prompts for a in p], 3, condition="default", temperature=0.0)
    boots = bootstrap_accept_len(_per_prompt(prompts, 3), n_boot=400, seed=1)
    values = sorted(b[3] for b in boots)
    assert values[20] <= pooled.accept_len[3] <= values[379]
    wide = values[379] - values[20]
    more = bootstrap_accept_len(_per_prompt(prompts * 25, 3), n_boot=400, seed=1)
    tight = sorted(b[3] for b in more)
    assert tight[379] - tight[20] < wide / 2  # 25x the prompts: about a fifth of the width


def test_choose_depth_prefers_the_smaller_depth_within_noise():
    # k=3 beats k=2 by a hair on the point estimate, but the prompts disagree wildly
    prompts = [[3, 3, 0, 0], [2, 2, 2, 2], [3, 0, 3, 0], [1, 3, 2, 3]]
    rows = _per_prompt(prompts, 3)
    curve = curve_from_accepted([a for p in prompts for a in p], 3, condition="default", temperature=0.0)
    plain = choose_depth(curve, 0.05)
    noisy = choose_depth(curve, 0.05, per_prompt=rows, seed=0)
    assert plain.depth == 3 and noisy.best_point == 3
    assert noisy.depth < 3 and noisy.accept_len_ci[0] <= noisy.accept_len <= noisy.accept_len_ci[1]
    # with clear data the best depth stands
    clear = [[3, 3, 3, 3]] * 40
    sure = choose_depth(
        curve_from_accepted([3] * 160, 3, condition="default", temperature=0.0),
        0.05,
        per_prompt=_per_prompt(clear, 3),
        seed=0,
    )
    assert sure.depth == 3 and sure.accept_len_ci == (4.0, 4.0)


def test_batch_speedup_reduces_to_leviathan_when_verify_costs_one_decode():
    from pipeline.core.choice import batch_speedup

    alpha, c = 0.7, 0.1
    acc = accept_len_from_survival(survival_from_cond([alpha] * 6))
    ours = batch_speedup(acc, draft_ms=c * 2.0, verify_ms=[2.0] * 7)  # verifying k+1 tokens = one decode
    assert ours == pytest.approx([leviathan_speedup(alpha, k, c) for k in range(7)])


def test_depth_falls_to_zero_as_verification_becomes_compute_bound():
    from pipeline.core.choice import depth_per_batch
    from pipeline.core.types import CostProfile, Curve

    surv = survival_from_cond([0.8] * 6)
    curve = Curve("default", 0.0, 100, (0.8,) * 6, tuple(surv), tuple(accept_len_from_survival(surv)))
    # small batches: verify costs what decode costs; large batches: verify grows with B * (k+1)
    verify = {1: [1.0] * 7, 16: [1.0 + 0.1 * k for k in range(7)], 256: [1.0 * (k + 1) for k in range(7)]}
    cost = CostProfile(
        "gpu",
        0.05,
        1.0,
        1.0,
        batch_sizes=(1, 16, 256),
        draft_ms_by_batch=(0.05, 0.08, 0.3),
        verify_ms_by_batch=tuple(tuple(verify[b]) for b in (1, 16, 256)),
    )
    depths = depth_per_batch(curve, cost)
    assert depths[1] >= depths[16] > depths[256] == 0


def test_decode_walk_starts_a_chain_only_after_each_pass():
    from pipeline.core.acceptance import decode_walk, walk_accept_len

    assert decode_walk([0, 0, 0], 3) == (3, 3)
    assert decode_walk([2, 5, 0, 1, 0], 3) == (5, 2)  # passes at 0 (2 kept) and 3 (1 kept)
    assert decode_walk([2, 5, 0, 1, 0], 1) == (5, 3)  # passes at 0, 2 and 3
    assert decode_walk([2, 5, 0, 1, 0], 0) == (5, 5)  # plain decoding: one token per pass
    assert walk_accept_len([[[3, 3], [5, 3]], [[2, 2], [3, 1]]]) == [1.0, 2.0]


def test_choice_uses_decoder_tokens_per_pass_and_timed_passes_when_given():
    from pipeline.core.choice import choose_depth
    from pipeline.core.types import Curve

    curve = Curve(
        condition="c",
        temperature=0.0,
        num_chains=9,
        cond_accept=(0.9, 0.9),
        survival=(0.9, 0.81),
        accept_len=(1.0, 1.9, 2.71),
        decode_accept_len=(1.0, 1.5, 1.6),
    )
    plain = choose_depth(curve, 0.1)
    assert plain.speedups == pytest.approx((1.0, 1.5 / 1.1, 1.6 / 1.2)) and plain.depth == 1
    timed = choose_depth(curve, 0.1, pass_cost=[1.0, 1.6, 1.7])
    assert timed.depth == 0 and timed.speedups == pytest.approx((1.0, 1.5 / 1.6, 1.6 / 1.7))
    with pytest.raises(ValueError, match="pass_cost"):
        choose_depth(curve, 0.1, pass_cost=[1.0, 1.6])


def test_bootstrap_bands_cover_the_central_share_of_resamples():
    from pipeline.core.choice import bands, bootstrap_accept_len

    boots = [[float(i), 100.0 - i] for i in range(101)]  # 0..100 and 100..0
    assert bands(boots, 0.9) == [(5.0, 95.0), (5.0, 95.0)]
    assert bands(boots, 0.5) == [(25.0, 75.0), (25.0, 75.0)]
    # prompts that differ: the interval of accept_len(k) widens with k and holds the pooled value
    rows = [(10, 9.0, 8.0), (10, 5.0, 2.0), (10, 8.0, 6.0), (10, 3.0, 1.0)]
    (lo0, hi0), (lo1, hi1), (lo2, hi2) = bands(bootstrap_accept_len(rows, n_boot=500, seed=0))
    assert lo0 == hi0 == 1.0 and lo1 < 1.625 < hi1 and hi2 - lo2 > hi1 - lo1
