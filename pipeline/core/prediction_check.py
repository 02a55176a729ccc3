"""The predicted speedup held to the engine's measurement: the interval a validation run should
land in, how far it landed from the prediction, and which factor moved it.

The depth choice predicts tokens per pass from the curve's n prompts, and validation measures
them on m other prompts. A bootstrap over the curve's prompts alone says how well the curve knows
its own mean; a measurement on m new prompts scatters around that mean as well. The prediction
interval therefore resamples twice per replicate: n prompts from the curve's (the estimate's
uncertainty), then m prompts from that resample (the validation sample's own spread), and
pools the m as the engine pools its passes. With m = 0 (the validation's prompt count unknown) it
is the curve's interval alone. The pass cost is a measurement too: where the profile says how far
its timing moves (pipeline/core/timing_noise.py), each replicate's pass cost draws that much.

A measured speedup is (engine tokens per pass at k) over (the pass at k in plain decode
steps, as the engine timed it), and the prediction is the curve's tokens per pass over the cost
table's pass at k. So measured / predicted = acceptance factor * cost factor: the engine's
tokens per pass over the curve's, and the predicted pass cost over the measured one. A factor
off 1 names the side the bias comes from (the prompts and positions, or the timing).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.core.acceptance import curve_from_prompt_rows, walk_accept_len
from pipeline.core.choice import bands


@dataclass(frozen=True)
class PredictionCheck:
    """One depth's predicted speedup beside the measured one (batch size 1)."""

    depth: int
    predicted: float
    lo: float  # the prediction interval for a validation sample of `sample_prompts` prompts
    hi: float
    measured: float
    acceptance_factor: float  # engine tokens per pass / predicted tokens per pass
    cost_factor: float  # predicted pass cost / measured pass cost (both in plain decode steps)

    @property
    def bias(self) -> float:
        """measured / predicted - 1 (negative: the prediction ran high)."""
        return self.measured / self.predicted - 1.0

    @property
    def covered(self) -> bool:
        return self.lo <= self.measured <= self.hi


def point_check(
    depth: int, *, tokens: float, predicted: float, engine_tokens: float, measured: float, lo=None, hi=None
) -> PredictionCheck:
    """One prediction beside its measurement, with the two factors between them: `tokens` is the
    tokens per pass the prediction used, `engine_tokens` what the engine kept (lo, hi: the interval,
    the point itself without one)."""
    return PredictionCheck(
        depth=depth,
        predicted=predicted,
        lo=predicted if lo is None else lo,
        hi=predicted if hi is None else hi,
        measured=measured,
        acceptance_factor=engine_tokens / tokens,
        cost_factor=(tokens / predicted) / (engine_tokens / measured),
    )


def _pooled_rows(rows) -> list[float]:
    return list(curve_from_prompt_rows(rows, condition="", temperature=0.0).accept_len)


def predictive_tokens(rows, pool, *, sample_prompts: int, n_boot: int, seed: int) -> list[list[float]]:
    """Tokens per pass at every depth on `n_boot` simulated validation samples: each resamples the
    curve's prompts (`rows`, one per prompt), then draws `sample_prompts` of that resample (all of
    it again when 0), and pools them with `pool`."""
    rng = random.Random(seed)
    n = len(rows)
    out = []
    for _ in range(n_boot):
        estimate = [rows[rng.randrange(n)] for _ in range(n)]
        sample = [estimate[rng.randrange(n)] for _ in range(sample_prompts)] if sample_prompts else estimate
        out.append(pool(sample))
    return out


def prediction_checks(
    curve,
    *,
    walks,
    per_prompt,
    pass_cost: Sequence[float],
    measured_speedup: Sequence[float],
    engine_accept_len: Sequence[float],
    sample_prompts: int,
    same_prompts: bool = False,
    timing_sigma: float = 0.0,
    level: float = 0.9,
    n_boot: int = 1000,
    seed: int = 0,
) -> list[PredictionCheck]:
    """Every depth k = 0..K of a validated choice: the prediction with its interval for a validation
    of `sample_prompts` prompts, the measurement, and the two factors between them.

    Tokens per pass are the ones the choice used (a decoder's walk when the curve has one);
    pass_cost[k] is the pass at depth k in plain decode steps, as the choice costed it.
    timing_sigma: how far (in log terms) the validation's pass cost scatters around the profile's
    (pipeline/core/timing_noise.py); each replicate's pass cost at k >= 1 is moved by a draw of it.
    same_prompts: the validation decoded the first `sample_prompts` of the curve's own prompts
    (`validation.prompts: curve`): the prediction is those prompts' tokens per pass, and only the
    timing moves it."""
    decode = bool(curve.decode_accept_len)
    tokens = curve.decode_accept_len if decode else curve.accept_len
    rows, pool = (walks, walk_accept_len) if decode else (per_prompt, _pooled_rows)
    if same_prompts and rows and 0 < sample_prompts < len(rows):
        rows = rows[:sample_prompts]
        tokens = pool(rows)
    depths = min(len(tokens), len(pass_cost), len(measured_speedup))
    if (rows and len(rows) >= 2 and not same_prompts) or timing_sigma > 0:
        if rows and len(rows) >= 2 and not same_prompts:
            boots = predictive_tokens(rows, pool, sample_prompts=sample_prompts, n_boot=n_boot, seed=seed)
        else:
            boots = [list(tokens)] * n_boot
        rng = random.Random(seed + 1)
        replicates = [
            [b[k] / (pass_cost[k] * (math.exp(rng.gauss(0.0, timing_sigma)) if k else 1.0)) for k in range(depths)]
            for b in boots
        ]
        intervals = bands(replicates, level)
    else:
        intervals = [(tokens[k] / pass_cost[k],) * 2 for k in range(depths)]
    return [
        point_check(
            k,
            tokens=tokens[k],
            predicted=tokens[k] / pass_cost[k],
            engine_tokens=engine_accept_len[k],
            measured=measured_speedup[k],
            lo=intervals[k][0],
            hi=intervals[k][1],
        )
        for k in range(depths)
    ]
