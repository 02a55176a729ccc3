"""Bootstrap intervals over prompts for reports: survival, accept_len and predicted speedup by depth.

The depth choice resamples prompts to tell real differences from noise (pipeline/core/choice.py);
these are the same resamples, kept as bands for plots and tables. A resample pools its prompts
exactly as the measured curve does, so the point estimate is the curve's own value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.core.choice import bands, batch_speedup, bootstrap_accept_len, bootstrap_walks
from pipeline.core.types import CostProfile, Curve


@dataclass(frozen=True)
class Band:
    """A value per depth and its central bootstrap interval (lo, hi), aligned by index."""

    value: tuple[float, ...]
    lo: tuple[float, ...]
    hi: tuple[float, ...]


@dataclass(frozen=True)
class BatchSpeedup:
    """Predicted speedup over plain decoding at every depth k = 0..K, at one batch size."""

    batch_size: int
    speedup: Band
    chosen: int  # the depth chosen at this batch size


def _band(value: Sequence[float], boots: Sequence[Sequence[float]] | None, level: float) -> Band:
    if not boots:
        return Band(tuple(value), tuple(value), tuple(value))
    lo, hi = zip(*bands(boots, level))
    return Band(tuple(value), tuple(lo), tuple(hi))


def curve_bands(
    curve: Curve, per_prompt, *, level: float = 0.9, n_boot: int = 1000, seed: int = 0
) -> tuple[Band, Band]:
    """(survival by depth j = 1..K, accept_len by depth k = 0..K) with their intervals; without
    per-prompt rows (fewer than two prompts) the interval is the point itself."""
    if len(per_prompt) < 2:
        return _band(curve.survival, None, level), _band(curve.accept_len, None, level)
    boots = bootstrap_accept_len(per_prompt, n_boot=n_boot, seed=seed)
    survival = [[b[j] - b[j - 1] for j in range(1, len(b))] for b in boots]  # accept_len(k) = 1 + sum survival
    return _band(curve.survival, survival, level), _band(curve.accept_len, boots, level)


def speedup_bands(
    curve: Curve,
    *,
    per_prompt,
    walks,
    cost: CostProfile,
    batch1_cost: Sequence[float],
    chosen: dict[int, int],
    level: float = 0.9,
    n_boot: int = 1000,
    seed: int = 0,
) -> list[BatchSpeedup]:
    """Predicted speedup by depth at every profiled batch size, with its interval over prompts.

    Tokens per pass are those the depth choice used: a decoder's (from `walks`) when the curve has
    them, else accept_len. Batch size 1 is costed as the choice was (`batch1_cost[k]`: a pass at
    depth k in plain decode steps), other batch sizes from the timed draft and verify passes.
    `chosen` maps batch size -> chosen depth.
    """
    decode = bool(curve.decode_accept_len)
    tokens = curve.decode_accept_len if decode else curve.accept_len
    rows = walks if decode else per_prompt
    boots = None
    if len(rows) >= 2:
        boots = (
            bootstrap_walks(walks, n_boot=n_boot, seed=seed)
            if decode
            else bootstrap_accept_len(per_prompt, n_boot=n_boot, seed=seed)
        )

    def at(batch: int, draft_ms: float | None, verify_ms: Sequence[float] | None):
        if draft_ms is None:
            return lambda t: [a / c for a, c in zip(t, batch1_cost)]
        return lambda t: batch_speedup(
            t[: len(verify_ms)], draft_ms=draft_ms, verify_ms=verify_ms, one_pass=cost.one_pass
        )

    costs = [(1, None, None)] + [
        (b, d, v) for b, d, v in zip(cost.batch_sizes, cost.draft_ms_by_batch, cost.verify_ms_by_batch) if b != 1
    ]
    out = []
    for batch, draft_ms, verify_ms in costs:
        speedup = at(batch, draft_ms, verify_ms)
        out.append(
            BatchSpeedup(
                batch,
                _band(speedup(tokens), boots and [speedup(b) for b in boots], level),
                chosen.get(batch, chosen.get(1, 0)),
            )
        )
    return out
