"""How far an engine iteration's cost, in plain decode steps, moves between two timings.

The predicted speedup divides tokens per pass by the pass at depth k in plain decode steps, from the
cost profile; validation measures the same ratio again, minutes later and on other prompts. On a
shared CPU that ratio moved by up to 10% between two timings of one job a minute apart (SmolLM2 and
the built-in fleet, 2026-12-06), as much as the acceptance's own sampling spread, so a prediction
interval that leaves it out covers the measurement too rarely.

The profile therefore times the engine iteration in blocks: one at the start of the job and one at
its end, each on its own half of the prompts (pipeline/core/types.py `CostProfile.pass_ms_blocks`).
The spread of log(pass[k] / pass[0]) between the blocks, pooled over the depths, estimates sigma, the
spread of one block's ratio. The profile's ratio averages B blocks (sigma / sqrt(B)); a validation's
ratio is one more timing (sigma): the measured over the predicted cost differs by
sigma * sqrt(1 + 1/B) in log terms.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def block_sigma(blocks: Sequence[Sequence[float]]) -> float:
    """The spread (standard deviation) of one block's log(pass[k] / pass[0]), pooled over k >= 1
    and the blocks; 0.0 with fewer than two blocks or no depth beyond 0."""
    if len(blocks) < 2 or min(len(b) for b in blocks) < 2:
        return 0.0
    depths = min(len(b) for b in blocks)
    squares, dof = 0.0, 0
    for k in range(1, depths):
        logs = [math.log(b[k] / b[0]) for b in blocks]
        mean = sum(logs) / len(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        dof += len(logs) - 1
    return math.sqrt(squares / dof)


def prediction_sigma(blocks: Sequence[Sequence[float]]) -> float:
    """The log-spread of a measured pass cost around the profile's (the mean of the blocks):
    sigma * sqrt(1 + 1/B)."""
    return block_sigma(blocks) * math.sqrt(1.0 + 1.0 / len(blocks)) if len(blocks) >= 2 else 0.0


def mean_blocks(blocks: Sequence[Sequence[float]]) -> list[float]:
    """The profile's figure per depth: the mean of the blocks' medians."""
    return [sum(column) / len(column) for column in zip(*blocks)]
