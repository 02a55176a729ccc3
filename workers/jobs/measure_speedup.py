"""measure_speedup: the real engine at every depth, and the verdict on the depth the choice made.

The verdict passes when the chosen depth reaches (1 - tolerance) of the best measured tokens/s,
every depth decoded exactly what plain greedy decoding does, and the costs the choice used were
timed on the hardware the engine ran on.
"""
from __future__ import annotations

import dataclasses

from pipeline.core.contracts import MeasureSpeedupConfig, Selected, SpeedupCheck, Validated
from workers.device import hardware_id, pick_device
from workers.family import load_pairing
from workers.speedup import EngineBenchmark, engine_speedups


def run(config: MeasureSpeedupConfig, inputs: dict, *, num_gpus: float, progress) -> Validated:
    device = pick_device(num_gpus)
    selected = inputs["depth"]
    evaluation = config.evaluation
    if (selected.condition, selected.temperature) != (evaluation.conditions[0], evaluation.temperatures[0]):
        raise ValueError("the depth choice was made for another condition or temperature than the one validated")
    target, tokenizer, family, drafter = load_pairing(config.target, config.drafter, inputs, device)
    measured = engine_speedups(target=target, proposer=family.proposer(drafter), tokenizer=tokenizer,
                               evaluation=evaluation, validation=config.validation, seed=config.seed)
    param = next(target.parameters())
    return Validated(speedup_check=verdict(measured, selected, hardware_id(param.device, param.dtype),
                                           config.validation.tolerance))


def verdict(measured: EngineBenchmark, selected: Selected, hardware: str, tolerance: float) -> SpeedupCheck:
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
    return SpeedupCheck(**dataclasses.asdict(measured), predicted_speedup=choice.speedups, chosen_depth=choice.depth,
                        best_measured_depth=best, chosen_vs_best=chosen_vs_best, tolerance=tolerance,
                        hardware=hardware, cost_hardware=selected.hardware, passed=not problems,
                        problems=tuple(problems))
