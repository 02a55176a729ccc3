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
- the printed config reaches (1 - tolerance) of the fastest depth of the sweep at every batch size;
- the costs the choice used were timed on the hardware the engine ran on.

How far the engine's acceptance and speed fall from what specfleet measured and predicted is
reported in the notes, not judged: the engine's own kernels and scheduler set its cost per pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pipeline.core.choice import batch_speedup
from pipeline.core.contracts import Selected, ServedPoint, ServingCheck
from pipeline.core.types import CostProfile, Curve


def predictor(selected: Selected, curve: Curve, cost: CostProfile) -> Callable[[int, int], float]:
    """speedup(k, batch size) as specfleet predicts it: the choice's own model at batch size 1, the
    batch-size model (draft and verify timed at that batch size) elsewhere."""
    tokens = curve.decode_accept_len or curve.accept_len
    by_batch = {
        b: batch_speedup(tokens[: len(verify)], draft_ms=draft, verify_ms=verify)
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
            )
        )
    return tuple(points)


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
    depths = sorted({k for _, _, k in schedule})
    for point in chosen:
        b = point.batch_size
        at_b = [p for p in sweep if p.batch_size == b]
        fastest = max(at_b, key=lambda p: (p.tokens_per_s, -p.depth))
        best_depth[b] = fastest.depth
        chosen_vs_best[b] = point.tokens_per_s / fastest.tokens_per_s
        if chosen_vs_best[b] < 1.0 - tolerance:
            problems.append(
                f"batch size {b}: the printed config (k={point.depth}) reaches {chosen_vs_best[b]:.1%} of "
                f"the engine's fastest depth k={fastest.depth}"
            )
        ran, k = point.depth_run, point.depth
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
        tolerance=tolerance,
        passed=not problems,
        problems=tuple(problems),
        notes=tuple(notes),
    )
