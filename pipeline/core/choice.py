"""Pure maths of the depth choice: predicted speedup per depth, noise-aware choice, batch sizes.

Leviathan et al. (2023, Theorem 3.8): with a constant acceptance alpha and a drafter step
costing c target decode steps, speculating k tokens speeds decoding up by
(1 - alpha^(k+1)) / ((1 - alpha)(k c + 1)), assuming a pass over k+1 tokens costs one decode
step. specfleet uses measured tokens per pass instead of the geometric sum and, by default,
timed engine iterations instead of `k c + 1`. Per batch size B:
speedup(B, k) = tokens(k) * t_decode(B) / (k * t_draft(B) + t_verify(B, k+1)).

The depth is the k in 0..max_depth that maximises decode_accept_len(k) * pass_ms[0] / pass_ms[k]
(pipeline/core/acceptance.py, workers/measure/cost.py). With `cost.cost_ratio` set in the spec
it maximises decode_accept_len(k) / (k c + 1) instead: Leviathan's form, which assumes that
verifying k+1 tokens costs one decode step. On a CPU that assumption fails (a pass over 2
tokens costs 1.1 to 1.3 decode steps on the quickstart target), and the quickstart's
validation (experiments/results/quickstart/README.md) shows how far the form then overstates
the engine's speed.

With costs at several batch sizes the depth is chosen per batch size by the formula above.
Batch size 1 keeps the choice above, and a depth never rises as the batch grows (verifying only
gets dearer with B, so a rise would be noise): the depths of the larger batch sizes are chosen
together, the non-rising ones with the largest summed speedup, so that one batch size timed
high does not end the drafting for all the larger ones. The result is a schedule of inclusive
batch-size ranges up to `cost.max_batch_size` (pipeline/core/schedule.py), saved as
`schedule.json` in the select job's MLflow run; where speculation stops paying, the depth
falls to 0.

A bootstrap over prompts (1,000 resamples of their decode walks) puts an interval on the
predicted speedups, and another on accept_len. When a smaller depth's speedup is within noise
of the best one, the smaller depth is chosen; within noise means that the 90% interval of the
paired difference reaches 0. Both the interval and the point-estimate optimum go to MLflow.

Tuned configs are versioned: every decision is a new immutable row, with one active version
per (pairing, hardware, condition). A row holds a source (`offline` for a run, `production`
for metrics), the schedule, and provenance: the curve, cost-table and drafter jobs it came
from, the spec hash, the code version and the MLflow run.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from pipeline.core.acceptance import accept_len_from_survival, closed_form_accept_len, walk_accept_len
from pipeline.core.types import Curve, DepthChoice


def leviathan_speedup(alpha: float, k: int, cost_ratio: float) -> float:
    """Leviathan et al. Thm 3.8: (1 - alpha^(k+1)) / ((1 - alpha)(k c + 1))."""
    return closed_form_accept_len(alpha, k) / (k * cost_ratio + 1.0)


def curve_speedup(accept_len: Sequence[float], cost_ratio: float) -> list[float]:
    """Speedup at every k from a measured curve: accept_len(k) / (k c + 1).

    Same cost model as Leviathan's theorem (verifying k+1 tokens costs one decode step), with
    the measured accept_len in place of the constant-alpha geometric sum.
    """
    return [a / (k * cost_ratio + 1.0) for k, a in enumerate(accept_len)]


def bootstrap_accept_len(per_prompt: Sequence[Sequence[float]], *, n_boot: int, seed: int) -> list[list[float]]:
    """accept_len(k) for k = 0..K on `n_boot` resamples of the prompts (with replacement).

    per_prompt rows are [chains, sum of survival[1], ..., sum of survival[K]] for one prompt, so a
    resample pools exactly as the measured curve does.
    """
    rng = random.Random(seed)
    n = len(per_prompt)
    out = []
    for _ in range(n_boot):
        rows = [per_prompt[rng.randrange(n)] for _ in range(n)]
        chains = sum(r[0] for r in rows)
        survival = [sum(r[j] for r in rows) / chains for j in range(1, len(rows[0]))]
        out.append(accept_len_from_survival(survival))
    return out


def bootstrap_walks(walks, *, n_boot: int, seed: int) -> list[list[float]]:
    """walk_accept_len on `n_boot` resamples of the prompts (with replacement)."""
    rng = random.Random(seed)
    n = len(walks)
    return [walk_accept_len([walks[rng.randrange(n)] for _ in range(n)]) for _ in range(n_boot)]


def bands(boots: Sequence[Sequence[float]], level: float = 0.9) -> list[tuple[float, float]]:
    """The central `level` interval of every position across bootstrap resamples (one row each)."""
    tail, n = (1.0 - level) / 2, len(boots)
    out = []
    for column in zip(*boots):
        values = sorted(column)
        out.append((values[int(round(tail * (n - 1), 9))], values[int(round((1 - tail) * (n - 1), 9))]))
    return out


def choose_depth(
    curve: Curve,
    cost_ratio: float,
    *,
    pass_cost: Sequence[float] | None = None,
    per_prompt=None,
    walks=None,
    seed: int = 0,
    n_boot: int = 1000,
    level: float = 0.9,
    cost_model: str | None = None,
) -> DepthChoice:
    """The k in 0..max_depth with the highest predicted speedup (the smaller k on a tie).

    Tokens per target pass are the curve's decode_accept_len when it has one (the positions a
    decoder visits), else its accept_len. A target pass at depth k costs `k * cost_ratio + 1`
    decode steps (Leviathan's model), or `pass_cost[k]` when the engine's iteration at every
    depth was timed (pass_cost[0] = 1). With per-prompt data (`walks` for decode_accept_len,
    `per_prompt` for accept_len), depths whose speedup is within noise of the best (the
    bootstrap interval of their paired difference to the best contains 0) count as equal, and
    the smallest of them is chosen: a smaller depth wastes less when acceptance falls.
    """
    if cost_ratio <= 0:
        raise ValueError(f"cost_ratio must be > 0, got {cost_ratio}")
    tokens = curve.decode_accept_len or curve.accept_len
    cost = list(pass_cost) if pass_cost is not None else leviathan_cost(cost_ratio, len(tokens))
    if len(cost) != len(tokens) or min(cost) <= 0:
        raise ValueError(f"pass_cost needs a positive cost for every k = 0..{curve.max_depth}, got {cost}")
    speedups = [a / c for a, c in zip(tokens, cost)]
    best = max(range(len(speedups)), key=lambda k: (speedups[k], -k))
    chosen, ci = best, None
    tail = (1.0 - level) / 2
    on_curve = bootstrap_accept_len(per_prompt, n_boot=n_boot, seed=seed) if per_prompt else None
    boots = (
        (bootstrap_walks(walks, n_boot=n_boot, seed=seed) if walks else None) if curve.decode_accept_len else on_curve
    )
    if boots:
        for k in range(best):
            diffs = sorted(b[best] / cost[best] - b[k] / cost[k] for b in boots)
            if diffs[int(tail * (n_boot - 1))] <= 0.0:  # the interval of the difference reaches 0
                chosen = k
                break
    if on_curve:
        ci = bands(on_curve, level)[chosen]
    return DepthChoice(
        depth=chosen,
        accept_len=curve.accept_len[chosen],
        decode_accept_len=curve.decode_accept_len[chosen] if curve.decode_accept_len else None,
        cost_model=cost_model or ("timed" if pass_cost is not None else "leviathan"),
        speedup=speedups[chosen],
        cost_ratio=cost_ratio,
        speedups=tuple(speedups),
        best_point=best,
        accept_len_ci=ci,
    )


def batch_speedup(
    accept_len: Sequence[float], *, draft_ms: float, verify_ms: Sequence[float], one_pass: bool = False
) -> list[float]:
    """speedup(B, k) = accept_len(k) * t_decode(B) / (n(k) * t_draft(B) + t_verify(B, k+1)) for k = 0..K,
    where n(k) = k drafter passes, or one for k >= 1 when the drafter drafts a round in one pass
    (`one_pass`, a DFlash block drafter: t_draft is then that pass).

    verify_ms[k] is the target pass over k+1 new tokens at this batch size (verify_ms[0]: decode).
    """
    decode = verify_ms[0]
    return [a * decode / (draft_passes(k, one_pass) * draft_ms + verify_ms[k]) for k, a in enumerate(accept_len)]


def draft_passes(k: int, one_pass: bool) -> int:
    """Drafter passes of a round at depth k: k, or one (none at k = 0) for a one-pass drafter."""
    return min(k, 1) if one_pass else k


def leviathan_cost(cost_ratio: float, depths: int, one_pass: bool = False) -> list[float]:
    """Leviathan's cost of a round at k = 0..depths-1 in decode steps: draft_passes(k) * c + 1."""
    return [draft_passes(k, one_pass) * cost_ratio + 1.0 for k in range(depths)]


def depth_per_batch(curve: Curve, cost, first: int | None = None) -> dict[int, int]:
    """k*(B) for every profiled batch size B, from a decoder's tokens per pass when measured: the
    depths, never rising with B, whose predicted speedups summed over the profiled batch sizes are
    the largest (the smaller depths on a tie). Verifying more tokens only gets dearer as the batch
    grows, so a rise would be noise; choosing the depths together, rather than capping each by the
    one before, keeps one noisy batch size from pulling every larger one down with it. `first`
    fixes the depth at the first batch size."""
    tokens = curve.decode_accept_len or curve.accept_len
    table = [
        batch_speedup(tokens[: len(verify)], draft_ms=draft, verify_ms=verify, one_pass=cost.one_pass)
        for draft, verify in zip(cost.draft_ms_by_batch, cost.verify_ms_by_batch)
    ]
    if not table:
        return {}

    def rank(entry):  # the larger summed speedup, then the shallower depths
        total, path = entry
        return (total, -sum(path))

    # best[k]: (summed speedup, depths) over the batch sizes so far, the current one at depth k
    if first is None:
        best = {k: (s, (k,)) for k, s in enumerate(table[0])}
    else:  # fixed even past the depths timed at this batch size (a depth chosen from pass costs)
        best = {first: (table[0][first] if first < len(table[0]) else 0.0, (first,))}
    for row in table[1:]:
        after = {}
        for k, speedup in enumerate(row):
            deeper = [entry for before, entry in best.items() if before >= k]
            if deeper:
                total, path = max(deeper, key=rank)
                after[k] = (total + speedup, (*path, k))
        best = after
    _, depths = max(best.values(), key=rank)
    return dict(zip(cost.batch_sizes, depths))
