"""How far the engine's timing moves between blocks, and what that adds to a prediction."""

import math
import random

import pytest

from pipeline.core.timing_noise import block_sigma, mean_blocks, prediction_sigma


def test_one_block_or_identical_blocks_say_no_movement():
    assert block_sigma([(10.0, 15.0, 20.0)]) == 0.0
    assert block_sigma([(10.0, 15.0, 20.0), (20.0, 30.0, 40.0)]) == 0.0  # the machine slowed, ratios held
    assert prediction_sigma([(10.0, 15.0)]) == 0.0


def test_the_spread_is_of_the_ratio_to_a_plain_step_pooled_over_depths():
    blocks = [(10.0, 15.0, 20.0), (10.0, 15.0 * math.exp(0.1), 20.0 * math.exp(-0.1))]
    # per depth, two logs 0.1 apart: sample variance 0.005; pooled over two depths, 0.005
    assert block_sigma(blocks) == pytest.approx(math.sqrt(0.005))
    assert prediction_sigma(blocks) == pytest.approx(math.sqrt(0.005) * math.sqrt(1.5))
    assert mean_blocks(blocks) == pytest.approx([10.0, 15.0 * (1 + math.exp(0.1)) / 2, 20.0 * (1 + math.exp(-0.1)) / 2])


def test_the_estimate_recovers_the_spread_that_made_the_blocks():
    """Blocks whose ratios scatter by sigma = 0.05 in log terms: over many profiles, the pooled
    estimate averages near 0.05 (its square is unbiased)."""
    rng = random.Random(0)
    true, depths = 0.05, 6
    estimates = []
    for _ in range(400):
        blocks = [
            [1.0] + [(1 + 0.3 * k) * math.exp(rng.gauss(0, true)) for k in range(1, depths + 1)] for _ in range(2)
        ]
        estimates.append(block_sigma(blocks) ** 2)
    assert math.sqrt(sum(estimates) / len(estimates)) == pytest.approx(true, rel=0.1)
