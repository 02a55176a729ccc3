"""The serving engine's clock as a cost table, and two cost sources for one depth choice compared on
a serving check's sweep: specfleet's timed passes (what the choice used) against the engine's.

An engine iteration at depth k emits accept_len(k) tokens per sequence, so over the same number of
generated tokens (every sweep run decodes the same prompts to the same length) its cost relative to
plain decoding is

    cost(k) = t_iteration(k) / t_iteration(0) = accept_len(k) / speedup(k)

from either side's numbers: the engine's measured speedup and its own mean accepted length, or
specfleet's predicted speedup and the curve's tokens per pass it was predicted from. With the
engine's costs and specfleet's curve, the choice would have been argmax_k curve(k) / cost_engine(k);
the engine's measured tokens/s at each choice says which cost source chose better. The engine's
time includes its prefill and scheduling, spread over the iterations: what serving pays.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.serving_verdict import run_accept_len
from pipeline.core.types import CostProfile


@dataclass(frozen=True)
class CostComparison:
    batch_size: int
    depths: tuple[int, ...]  # the sweep's depths, 0 first
    ours: tuple[float, ...]  # specfleet's iteration cost per depth, relative to plain decoding
    engine: tuple[float, ...]  # the serving engine's, from its clock and counters
    ours_depth: int  # the depth the printed config asks for at this batch size
    engine_depth: int  # the depth specfleet's curve would choose with the engine's costs
    ours_share: float  # the engine's tokens/s at ours_depth over its fastest depth
    engine_share: float  # the same at engine_depth


def cost_comparison(check) -> list[CostComparison]:
    """Per batch size of a ServingCheck, both cost tables and what each chooses, judged by the
    engine's own measurement. Batch sizes whose printed depth the sweep did not run are left out."""
    out = []
    for b in sorted({p.batch_size for p in check.sweep}):
        points = sorted((p for p in check.sweep if p.batch_size == b), key=lambda p: p.depth)
        chosen = next((p for p in check.chosen if p.batch_size == b), None)
        by_depth = {p.depth: p for p in points}
        ours_depth = chosen.depth if chosen is not None else 0
        if not points or points[0].depth != 0 or ours_depth not in by_depth:
            continue
        ours = tuple(p.curve_accept_len / p.predicted_speedup for p in points)
        engine = tuple(p.accept_len / p.measured_speedup for p in points)
        engine_depth = max(points, key=lambda p: (p.curve_accept_len / (p.accept_len / p.measured_speedup), -p.depth))
        fastest = max(p.tokens_per_s for p in points)
        out.append(
            CostComparison(
                batch_size=b,
                depths=tuple(p.depth for p in points),
                ours=ours,
                engine=engine,
                ours_depth=ours_depth,
                engine_depth=engine_depth.depth,
                ours_share=by_depth[ours_depth].tokens_per_s / fastest,
                engine_share=engine_depth.tokens_per_s / fastest,
            )
        )
    return out


def iteration_ms(batch: dict) -> float:
    """One engine iteration's time in one batch size's runs of an engine answer
    (workers/serving/vllm_side.py): every sequence gains accept_len tokens an iteration, so the
    iterations are tokens / (batch size x accept_len)."""
    return 1000.0 * batch["seconds"] * batch["batch_size"] * run_accept_len(batch) / batch["tokens"]


def engine_cost_profile(answers: list[dict], *, hardware: str, timed_by: str) -> CostProfile:
    """A cost table from the serving engine's answers at every constant depth k = 0..K (answers[k]),
    each at the same batch sizes: whole iterations, since the engine times nothing apart. A depth
    per batch size then follows from verify_ms_by_batch[b][k] = the iteration at depth k with no
    separate draft time (speedup = accept_len(k) x t(0) / t(k)); at batch size 1 pass_ms is the
    same iteration (the timed cost model). draft_ms is the iteration's growth per drafted
    position at batch size 1 (what a `k c + 1` model would use), kept positive."""
    sizes = [b["batch_size"] for b in answers[0]["batches"]]
    table = [[iteration_ms(a["batches"][i]) for a in answers] for i in range(len(sizes))]
    one = table[sizes.index(1)]
    depth = len(one) - 1
    return CostProfile(
        hardware=hardware,
        draft_ms=max((one[-1] - one[0]) / max(depth, 1), 1e-3 * one[0]),
        decode_ms=one[0],
        verify_ms=one[-1],
        batch_sizes=tuple(sizes),
        draft_ms_by_batch=tuple(0.0 for _ in sizes),
        verify_ms_by_batch=tuple(tuple(row) for row in table),
        pass_ms=tuple(one),
        timed_by=timed_by,
    )
