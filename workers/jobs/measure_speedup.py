"""measure_speedup: the real engine at every depth, and the verdict on the depth the choice made.

The verdict passes when the chosen depth reaches (1 - tolerance) of the best measured tokens/s,
every depth decoded exactly what plain greedy decoding does, and the costs the choice used were
timed on the hardware the engine ran on. With a tree chosen, the engine also runs it, the best
trees one and two sizes either side, and the chain at its chosen depth; every one must decode as
plain greedy decoding does, and a tree that serving would run (predicted to beat the chain) must
reach (1 - tolerance) of the best of those and of the chain. A tree the chain beats is timed for
the report but not held to that bar: the chain is what is served.
"""
from __future__ import annotations

import dataclasses

from pipeline.core.contracts import HFRun, MeasureSpeedupConfig, Selected, SpeedupCheck, TreeCheck, TreeChoice, Validated
from workers.device import hardware_id, pick_device
from workers.family import load_pairing
from workers.hf_engine import hf_comparison
from workers.speedup import EngineBenchmark, engine_speedups, validation_prompts
from workers.tree_speedup import tree_benchmark
from workers.tokenizer import pad_id


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
    check = verdict(measured, selected, hardware_id(param.device, param.dtype), config.validation.tolerance)
    if config.validation.compare_hf:
        check = check.model_copy(update={"hf_runs": _hf_runs(target, tokenizer, family, drafter, config)})
    if selected.tree is not None and selected.tree.tree:  # an empty tree (no drafting pays) has nothing to run
        trees = _tree_check(target, tokenizer, family.proposer(drafter), selected.tree, config)
        problems = _tree_problems(trees, config.validation.tolerance, served=selected.tree.served)
        check = check.model_copy(update={"tree": trees, "problems": check.problems + problems,
                                         "passed": check.passed and not problems})
    return Validated(speedup_check=check)


def _tree_check(target, tokenizer, proposer, choice: TreeChoice, config: MeasureSpeedupConfig) -> TreeCheck:
    """The chosen tree and the best trees one and two sizes either side of it, timed with the chain."""
    n = len(choice.tree)
    picked = [choice.candidates[n]]
    for m in (n - 2, n - 1, n + 1, n + 2):  # each tree once, none empty
        if 1 <= m < len(choice.candidates) and choice.candidates[m].tree \
                and all(choice.candidates[m].tree != c.tree for c in picked):
            picked.append(choice.candidates[m])
    timed = tree_benchmark(target=target, proposer=proposer, tokenizer=tokenizer, evaluation=config.evaluation,
                           validation=config.validation, seed=config.seed, trees=[c.tree for c in picked],
                           chain_depth=choice.chain_depth)
    plain, chain, *tps = timed["tokens_per_s"]
    return TreeCheck(trees=tuple(c.tree for c in picked), tokens_per_s=tuple(tps),
                     engine_accept_len=tuple(timed["accept_len"][2:]),
                     decode_accept_len=tuple(c.decode_accept_len for c in picked),
                     predicted_speedup=tuple(c.speedups[0] for c in picked),
                     measured_speedup=tuple(t / plain for t in tps), plain_tokens_per_s=plain,
                     chain_depth=choice.chain_depth, chain_tokens_per_s=chain,
                     chain_predicted_speedup=choice.chain_speedup, greedy_mismatches=timed["greedy_mismatches"])


def _tree_problems(check: TreeCheck, tolerance: float, *, served: bool) -> tuple[str, ...]:
    problems = []
    best = max(max(check.tokens_per_s), check.chain_tokens_per_s)
    if served and check.tokens_per_s[0] < (1.0 - tolerance) * best:
        problems.append(f"the chosen tree reaches {check.tokens_per_s[0] / best:.1%} of the best measured shape "
                        f"(the trees around it and the chain at depth {check.chain_depth})")
    if check.greedy_mismatches:
        problems.append(f"{check.greedy_mismatches} prompt(s) decoded differently with a tree or the chain than with "
                        "plain greedy decoding")
    return tuple(problems)


def _hf_runs(target, tokenizer, family, drafter, config: MeasureSpeedupConfig) -> tuple[HFRun, ...]:
    """The same held-out prompts through HF generate, and HF assisted generation with a draft model."""
    evaluation, validation = config.evaluation, config.validation
    return hf_comparison(target, validation_prompts(tokenizer, evaluation, validation, config.seed),
                         new_tokens=validation.new_tokens or evaluation.continuation_len,
                         temperature=evaluation.temperatures[0], pad=pad_id(tokenizer), seed=config.seed,
                         assistant=family.hf_assistant(drafter), max_depth=evaluation.max_depth)


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
