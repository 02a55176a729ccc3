"""The prediction interval for a validation sample, and the split of the bias into its two factors."""

import math
import random

import pytest

from pipeline.core.acceptance import decode_walk, walk_accept_len
from pipeline.core.prediction_check import prediction_checks
from pipeline.core.timing_noise import mean_blocks, prediction_sigma
from pipeline.core.types import Curve, relative_pass_cost

DEPTH, POSITIONS = 3, 24


def _prompt_walk(rng: random.Random) -> list[tuple[int, int]]:
    """One prompt's decoder walk at k = 0..DEPTH; prompts differ in how easy they are."""
    alpha = rng.uniform(0.15, 0.85)
    accepted = []
    for _ in range(POSITIONS):
        n = 0
        while n < DEPTH and rng.random() < alpha:
            n += 1
        accepted.append(n)
    return [decode_walk(accepted, k) for k in range(DEPTH + 1)]


def _curve(walks) -> Curve:
    tokens = tuple(walk_accept_len(walks))
    return Curve(
        condition="template+bos",
        temperature=0.0,
        num_chains=len(walks) * POSITIONS,
        cond_accept=(0.5,) * DEPTH,
        survival=(0.5,) * DEPTH,
        accept_len=tokens,
        decode_accept_len=tokens,
    )


COST = (1.0, 1.3, 1.6, 1.9)


def _checks(curve_walks, engine_walks, sample_prompts, seed):
    engine = walk_accept_len(engine_walks)
    return prediction_checks(
        _curve(curve_walks),
        walks=curve_walks,
        per_prompt=(),
        pass_cost=COST,
        measured_speedup=[a / c for a, c in zip(engine, COST)],  # the engine's pass costs what the table says
        engine_accept_len=engine,
        sample_prompts=sample_prompts,
        n_boot=300,
        seed=seed,
    )


def test_the_interval_covers_a_new_sample_of_prompts_about_as_often_as_it_says():
    """Curves on 12 prompts, validations on 8 others: the prediction interval must cover the
    measurement near 90% of the time; the curve's own interval (the estimate alone) covers far
    less, because 8 new prompts scatter more than the mean of 12 is unsure."""
    rng = random.Random(7)
    covered = {8: 0, 0: 0}
    trials = 120
    for t in range(trials):
        curve_walks = [_prompt_walk(rng) for _ in range(12)]
        engine_walks = [_prompt_walk(rng) for _ in range(8)]
        for m in covered:
            covered[m] += _checks(curve_walks, engine_walks, m, seed=t)[2].covered
    assert 0.8 <= covered[8] / trials <= 0.98, covered
    assert covered[0] / trials < 0.8, covered


def test_the_bias_is_the_product_of_its_acceptance_and_cost_factors():
    curve_walks = [[(16, 16), (16, 10), (16, 8), (16, 7)], [(16, 16), (16, 12), (16, 11), (16, 10)]]
    curve = _curve(curve_walks)
    engine = (1.0, 1.5, 1.7, 1.8)
    measured = (1.0, 1.1, 1.0, 0.9)
    checks = prediction_checks(
        curve,
        walks=curve_walks,
        per_prompt=(),
        pass_cost=COST,
        measured_speedup=measured,
        engine_accept_len=engine,
        sample_prompts=8,
        n_boot=50,
    )
    for k, c in enumerate(checks):
        assert c.predicted == pytest.approx(curve.decode_accept_len[k] / COST[k])
        assert c.acceptance_factor == pytest.approx(engine[k] / curve.decode_accept_len[k])
        assert c.cost_factor == pytest.approx(COST[k] * measured[k] / engine[k])
        assert c.acceptance_factor * c.cost_factor == pytest.approx(c.measured / c.predicted)
        assert c.bias == pytest.approx(measured[k] / c.predicted - 1)
    assert checks[0].acceptance_factor == checks[0].cost_factor == 1.0


def test_a_wider_validation_sample_narrows_the_interval():
    rng = random.Random(3)
    curve_walks = [_prompt_walk(rng) for _ in range(12)]
    widths = [(lambda c: c.hi - c.lo)(_checks(curve_walks, curve_walks, m, seed=1)[2]) for m in (4, 16, 64)]
    assert widths[0] > widths[1] > widths[2]


def test_timing_that_moves_between_profile_and_validation_is_in_the_interval():
    """The pass cost at k in plain decode steps scatters by 15% (log terms) from one timing to the
    next. The profile's two blocks show it, and with their spread the interval covers the
    measurement near 90% of the time; leaving the timing out, far less often."""
    rng = random.Random(11)
    sigma, trials = 0.15, 150
    covered = {"with timing": 0, "without": 0}

    def timed():
        return [COST[0]] + [c * math.exp(rng.gauss(0.0, sigma)) for c in COST[1:]]

    for t in range(trials):
        curve_walks = [_prompt_walk(rng) for _ in range(12)]
        engine = walk_accept_len([_prompt_walk(rng) for _ in range(8)])
        blocks = [timed(), timed()]
        measured_cost = timed()
        for name, timing_sigma in (("with timing", prediction_sigma(blocks)), ("without", 0.0)):
            check = prediction_checks(
                _curve(curve_walks),
                walks=curve_walks,
                per_prompt=(),
                pass_cost=relative_pass_cost(mean_blocks(blocks)),
                measured_speedup=[a / c for a, c in zip(engine, measured_cost)],
                engine_accept_len=engine,
                sample_prompts=8,
                timing_sigma=timing_sigma,
                n_boot=300,
                seed=t,
            )[2]
            covered[name] += check.covered
    assert 0.8 <= covered["with timing"] / trials <= 0.98, covered
    assert covered["without"] / trials < 0.75, covered


def test_validated_on_the_curves_own_prompts_the_prediction_is_theirs_and_only_timing_widens_it():
    rng = random.Random(3)
    walks = [_prompt_walk(rng) for _ in range(12)]
    first = walks[:5]
    engine = walk_accept_len(first)  # the engine decoded the curve's first 5 prompts, as the walk did

    def checks(sigma):
        return prediction_checks(
            _curve(walks),
            walks=walks,
            per_prompt=(),
            pass_cost=COST,
            measured_speedup=[a / c for a, c in zip(engine, COST)],
            engine_accept_len=engine,
            sample_prompts=5,
            same_prompts=True,
            timing_sigma=sigma,
            n_boot=300,
            seed=0,
        )

    exact = checks(0.0)
    for c in exact:  # the prediction of those five prompts' text meets the engine on it exactly
        assert c.predicted == pytest.approx(c.measured) and c.lo == c.hi == c.predicted
        assert c.acceptance_factor == pytest.approx(1.0)
    assert exact[DEPTH].predicted != pytest.approx(walk_accept_len(walks)[DEPTH] / COST[DEPTH])  # not all 12
    timed = checks(0.05)
    assert timed[DEPTH].lo < timed[DEPTH].predicted < timed[DEPTH].hi and timed[0].lo == timed[0].hi
