"""The verdict of a serving engine on a depth choice (torch-free).

A `serve_check` job (workers/jobs/serve_check.py) starts the engine once per config: without
speculation, at every constant depth k = 1..max_depth, and with the config `specfleet autotune`
prints for the choice, each at every profiled batch size. This module turns the engine's answers
(its clock, its outputs and its spec-decode counters: workers/serving/vllm_side.py) into points
and judges them. The check passes when

- every output equals the engine's own output without speculation (greedy decoding);
- the engine ran the depth the printed config names for each batch size: exactly at batch size 1,
  and nearer that depth than any other depth of the schedule at larger batch sizes (a batch
  thins out as its requests finish, and a thinner batch may draft deeper);
- the printed config reaches (1 - tolerance) of the fastest depth of the sweep at every batch size,
  within the engine's own run-to-run noise: a miss is a problem only when the upper end of its 90%
  interval (resampling the repeats within each engine start and the groups of prompts, the same
  groups for every config) stays below 1 - tolerance. Where the printed config ran one constant
  depth of the sweep (always at batch size 1), the two engine starts measured one config: they
  are pooled, and how far apart they came is noted (the noise between engine starts);
- the costs the choice used were timed on the hardware the engine ran on.

How far the engine's acceptance and speed fall from what specfleet measured and predicted is
reported in the notes, not judged: the engine's own kernels and scheduler set its cost per pass.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from pipeline.core.choice import bands, batch_speedup
from pipeline.core.contracts import Selected, ServedPoint, ServingCheck
from pipeline.core.types import CostProfile, Curve


def predictor(selected: Selected, curve: Curve, cost: CostProfile) -> Callable[[int, int], float]:
    """speedup(k, batch size) as specfleet predicts it: the choice's own model at batch size 1, the
    batch-size model (draft and verify timed at that batch size) elsewhere."""
    tokens = curve.decode_accept_len or curve.accept_len
    by_batch = {
        b: batch_speedup(tokens[: len(verify)], draft_ms=draft, verify_ms=verify, one_pass=cost.one_pass)
        for b, draft, verify in zip(cost.batch_sizes, cost.draft_ms_by_batch, cost.verify_ms_by_batch)
    }

    def predict(k: int, batch_size: int) -> float:
        if batch_size == 1 or batch_size not in by_batch:
            return selected.choice.speedups[k]
        return by_batch[batch_size][k]

    return predict


def depth_at(schedule: Sequence[Sequence[int]], batch_size: int) -> int:
    """The depth a schedule of inclusive [lo, hi, k] ranges names for a batch size (past the last
    range, the last range's depth, as vLLM reads it)."""
    for lo, hi, k in schedule:
        if lo <= batch_size <= hi:
            return k
    return schedule[-1][2]


def run_accept_len(run: dict) -> float:
    """The engine's mean accepted length over one batch size's runs of an answer: tokens a sequence
    gains per iteration (1 without speculation)."""
    return 1.0 + run["accepted"] / run["drafts"] if run["drafts"] else 1.0


def served_points(
    answer: dict,
    plain: dict,
    *,
    schedule: Sequence[Sequence[int]],
    predict: Callable[[int, int], float],
    curve: Curve,
) -> tuple[ServedPoint, ...]:
    """One point per batch size of one engine's answer, against the engine without speculation."""
    tokens = curve.decode_accept_len or curve.accept_len
    base = {b["batch_size"]: b for b in plain["batches"]}
    points = []
    for run in answer["batches"]:
        size = run["batch_size"]
        k = depth_at(schedule, size)
        drafts = run["drafts"]
        tps = run["tokens"] / run["seconds"]
        plain_tps = base[size]["tokens"] / base[size]["seconds"]
        points.append(
            ServedPoint(
                depth=k,
                batch_size=size,
                tokens_per_s=tps,
                measured_speedup=tps / plain_tps,
                predicted_speedup=predict(k, size),
                accept_len=run_accept_len(run),
                curve_accept_len=tokens[k],
                accepted_per_pos=tuple(a / drafts for a in run["accepted_per_pos"]) if drafts else (),
                depth_run=run["draft_tokens"] / drafts if drafts else 0.0,
                greedy_equal=run["outputs"] == base[size]["outputs"],
                seconds=run["seconds"],
                tokens=run["tokens"],
                group_seconds=tuple(tuple(row) for row in run.get("group_seconds", ())),
            )
        )
    return tuple(points)


def _tokens_per_s(starts: Sequence[ServedPoint]) -> float:
    """A config's tokens/s over its engine starts together."""
    return sum(p.tokens for p in starts) / sum(p.seconds for p in starts)


def share_interval(
    chosen: Sequence[ServedPoint],
    sweep: Sequence[Sequence[ServedPoint]],
    *,
    level: float = 0.9,
    n_boot: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """The central `level` interval of the chosen config's tokens/s over the fastest sweep config's.

    A config is given as its engine starts (one point each; two where the printed config ran a
    depth of the sweep). Each resample draws the groups of prompts once (every config decoded the
    same groups) and, for each config, its starts and then each start's repeats: the noise between
    engine starts and within one both show. The fastest is picked again in each resample. Without
    the groups' seconds for every point the interval is the point estimate itself."""
    share = _tokens_per_s(chosen) / max(_tokens_per_s(config) for config in sweep)
    points = [p for config in (chosen, *sweep) for p in config]
    if not all(p.group_seconds for p in points) or len({len(r) for p in points for r in p.group_seconds}) != 1:
        return share, share
    n_groups = len(points[0].group_seconds[0])
    rng = random.Random(seed)

    def resampled(starts: Sequence[ServedPoint], groups: list[int]) -> float:
        tokens = seconds = 0.0
        for start in (starts[rng.randrange(len(starts))] for _ in starts):
            rows = start.group_seconds
            tokens += start.tokens
            seconds += sum(rows[rng.randrange(len(rows))][g] for _ in rows for g in groups)  # as many cells
        return tokens / seconds

    shares = []
    for _ in range(n_boot):
        groups = [rng.randrange(n_groups) for _ in range(n_groups)]
        mine = resampled(chosen, groups)
        shares.append([mine / max(resampled(config, groups) for config in sweep)])
    return bands(shares, level)[0]


def serving_verdict(
    *,
    engine: str,
    speculative_config: str,
    schedule: Sequence[Sequence[int]],
    sweep: Sequence[ServedPoint],
    chosen: Sequence[ServedPoint],
    selected: Selected,
    hardware: str,
    tolerance: float,
    notes: Sequence[str] = (),
) -> ServingCheck:
    """The printed config (`chosen`, one point per batch size) held to the sweep and the schedule."""
    problems: list[str] = []
    notes = list(notes)
    best_depth: dict[int, int] = {}
    chosen_vs_best: dict[int, float] = {}
    intervals: dict[int, tuple[float, float]] = {}
    depths = sorted({k for _, _, k in schedule})
    for point in chosen:
        b, k = point.batch_size, point.depth
        twin = next((p for p in sweep if p.batch_size == b and p.depth == k), None)
        pool = twin is not None and twin is not point and abs(point.depth_run - k) < 1e-9
        mine = [point, twin] if pool else [point]  # a config as its engine starts
        at_b = [mine if pool and p is twin else [p] for p in sweep if p.batch_size == b]
        if pool:
            notes.append(
                f"batch size {b}: the printed config ran k={k}, as the sweep's k={k} did: "
                f"{point.tokens_per_s:.1f} and {twin.tokens_per_s:.1f} tokens/s in two engine starts "
                f"({point.tokens_per_s / twin.tokens_per_s - 1:+.1%}); the verdict pools both"
            )
        fastest = max(at_b, key=lambda starts: (_tokens_per_s(starts), -starts[0].depth))
        best_depth[b] = fastest[0].depth
        share = chosen_vs_best[b] = _tokens_per_s(mine) / _tokens_per_s(fastest)
        lo, hi = intervals[b] = share_interval(mine, at_b)
        reach = (
            f"batch size {b}: the printed config (k={k}) reaches {share:.1%} [{lo:.1%}, {hi:.1%}] of "
            f"the engine's fastest depth k={fastest[0].depth}"
        )
        if hi < 1.0 - tolerance:
            problems.append(reach)
        elif share < 1.0 - tolerance:
            notes.append(f"{reach}: below {1 - tolerance:.0%}, within the engine's run-to-run noise")
        ran = point.depth_run
        if b == 1 and abs(ran - k) > 1e-9:
            problems.append(f"batch size 1: the engine drafted {ran:.3g} tokens a step, the config names k={k}")
        elif b > 1 and any(abs(ran - other) < abs(ran - k) for other in depths if other != k):
            problems.append(
                f"batch size {b}: the engine drafted {ran:.3g} tokens a step, nearer another depth than k={k}"
            )
    differing = sorted({(p.depth, p.batch_size) for p in (*sweep, *chosen) if not p.greedy_equal})
    if differing:
        where = ", ".join(f"k={k} at batch size {b}" for k, b in differing)
        problems.append(f"output differs from the engine's plain greedy decoding: {where}")
    if hardware != selected.hardware:
        problems.append(f"costs were timed on {selected.hardware}, the engine ran on {hardware}")
    one = next((p for p in chosen if p.batch_size == 1), None)
    if one is not None and one.depth > 0:
        gap = one.accept_len / one.curve_accept_len - 1.0
        notes.append(
            f"batch size 1, k={one.depth}: the engine's mean accepted length {one.accept_len:.3f} against "
            f"specfleet's {one.curve_accept_len:.3f} ({gap:+.1%}); speedup {one.measured_speedup:.3f}x "
            f"measured against {one.predicted_speedup:.3f}x predicted"
        )
    return ServingCheck(
        engine=engine,
        speculative_config=speculative_config,
        condition=selected.condition,
        temperature=selected.temperature,
        hardware=hardware,
        cost_hardware=selected.hardware,
        sweep=tuple(sweep),
        chosen=tuple(chosen),
        best_depth=best_depth,
        chosen_vs_best=chosen_vs_best,
        chosen_vs_best_interval=intervals,
        tolerance=tolerance,
        passed=not problems,
        problems=tuple(problems),
        notes=tuple(notes),
    )
