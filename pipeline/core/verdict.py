"""The verdict on a depth choice, from the real engine's measurements (torch-free).

A `measure_speedup` job (workers/jobs/measure_speedup.py) runs the engine at every depth k =
0..max_depth on held-out prompts; this module judges what it measured. The verdict passes when
the chosen depth reaches (1 - tolerance) of the best measured tokens/s, every depth decoded
exactly what plain greedy decoding does, and the costs the choice used were timed on the
hardware the engine ran on.

With a tree chosen, the engine also runs it, the best trees one and two sizes either side, and
the chain at its chosen depth; every one must decode as plain greedy decoding does, and a tree
that serving would run (predicted to beat the chain, `tree_contracts.serves_tree`) must reach
(1 - tolerance) of the best of those and of the chain. A tree the chain beats is timed for the
report but not held to that bar: the chain is what is served.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pipeline.core.contracts import Selected, SpeedupCheck, TreeCheck


@dataclass(frozen=True)
class EngineBenchmark:
    """The engine at every depth k = 0..max_depth (index k), under the primary condition."""

    condition: str
    temperature: float
    tokens_per_s: tuple[float, ...]
    measured_speedup: tuple[float, ...]  # tokens_per_s over depth 0's
    engine_accept_len: tuple[float, ...]  # tokens per target pass
    greedy_mismatches: int
    tokens: tuple[int, ...]
    seconds: tuple[float, ...]


def depth_verdict(measured: EngineBenchmark, selected: Selected, hardware: str, tolerance: float) -> SpeedupCheck:
    """The depth choice in `selected` held to what the engine measured on `hardware`."""
    choice = selected.choice
    tps = measured.tokens_per_s
    best = max(range(len(tps)), key=lambda k: tps[k])
    chosen_vs_best = tps[choice.depth] / tps[best]
    problems = []
    if chosen_vs_best < 1.0 - tolerance:
        problems.append(f"the chosen depth reaches {chosen_vs_best:.1%} of the best measured tokens/s")
    if measured.greedy_mismatches:
        problems.append(f"{measured.greedy_mismatches} prompt(s) decoded differently from plain greedy decoding")
    if hardware != selected.hardware:
        problems.append(f"costs were timed on {selected.hardware}, the engine ran on {hardware}")
    return SpeedupCheck(
        **dataclasses.asdict(measured),
        predicted_speedup=choice.speedups,
        chosen_depth=choice.depth,
        best_measured_depth=best,
        chosen_vs_best=chosen_vs_best,
        tolerance=tolerance,
        hardware=hardware,
        cost_hardware=selected.hardware,
        passed=not problems,
        problems=tuple(problems),
    )


def tree_problems(check: TreeCheck, tolerance: float, *, served: bool) -> tuple[str, ...]:
    """What fails in the timed trees: a served tree below the bar, any tree decoding differently."""
    problems = []
    best = max(max(check.tokens_per_s), check.chain_tokens_per_s)
    if served and check.tokens_per_s[0] < (1.0 - tolerance) * best:
        problems.append(
            f"the chosen tree reaches {check.tokens_per_s[0] / best:.1%} of the best measured shape "
            f"(the trees around it and the chain at depth {check.chain_depth})"
        )
    if check.greedy_mismatches:
        problems.append(
            f"{check.greedy_mismatches} prompt(s) decoded differently with a tree or the chain than with "
            "plain greedy decoding"
        )
    return tuple(problems)
