"""measure_speedup: the real engine at every depth (and the chosen tree with its neighbours), and
the verdict on what the choice predicted (pipeline/core/verdict.py holds the rule).
"""

from __future__ import annotations

from pipeline.core.contracts import HFRun, MeasureSpeedupConfig, TreeCheck, Validated
from pipeline.core.tree_contracts import TreeChoice
from pipeline.core.verdict import depth_verdict, tree_problems
from workers.data.tokenizer import pad_id
from workers.decoding.hf_generate import hf_comparison
from workers.drafters.pairing import load_pairing
from workers.measure.speedup import engine_speedups, validation_prompts
from workers.measure.tree_speedup import tree_benchmark
from workers.runtime.device import hardware_of, pick_device, split_gpus


def run(config: MeasureSpeedupConfig, inputs: dict, *, num_gpus: float, progress) -> Validated:
    device = pick_device(num_gpus)
    selected = inputs["depth"]
    evaluation = config.evaluation
    if (selected.condition, selected.temperature) != (evaluation.conditions[0], evaluation.temperatures[0]):
        raise ValueError("the depth choice was made for another condition or temperature than the one validated")
    target, tokenizer, family, drafter = load_pairing(
        config.target, config.drafter, inputs, device, split_gpus(num_gpus)
    )
    measured = engine_speedups(
        target=target,
        proposer=family.proposer(drafter),
        tokenizer=tokenizer,
        evaluation=evaluation,
        validation=config.validation,
        seed=config.seed,
    )
    check = depth_verdict(measured, selected, hardware_of(target), config.validation.tolerance)
    if config.validation.compare_hf:
        check = check.model_copy(update={"hf_runs": _hf_runs(target, tokenizer, family, drafter, config)})
    if selected.tree is not None and selected.tree.tree:  # an empty tree (no drafting pays) has nothing to run
        trees = _tree_check(target, tokenizer, family.proposer(drafter), selected.tree, config)
        problems = tree_problems(trees, config.validation.tolerance, served=selected.tree.served)
        check = check.model_copy(
            update={"tree": trees, "problems": check.problems + problems, "passed": check.passed and not problems}
        )
    return Validated(speedup_check=check)


def _tree_check(target, tokenizer, proposer, choice: TreeChoice, config: MeasureSpeedupConfig) -> TreeCheck:
    """The chosen tree and the best trees one and two sizes either side of it, timed with the chain."""
    n = len(choice.tree)
    picked = [choice.candidates[n]]
    for m in (n - 2, n - 1, n + 1, n + 2):  # each tree once, none empty
        if (
            1 <= m < len(choice.candidates)
            and choice.candidates[m].tree
            and all(choice.candidates[m].tree != c.tree for c in picked)
        ):
            picked.append(choice.candidates[m])
    timed = tree_benchmark(
        target=target,
        proposer=proposer,
        tokenizer=tokenizer,
        evaluation=config.evaluation,
        validation=config.validation,
        seed=config.seed,
        trees=[c.tree for c in picked],
        chain_depth=choice.chain_depth,
    )
    plain, chain, *tps = timed["tokens_per_s"]
    return TreeCheck(
        trees=tuple(c.tree for c in picked),
        tokens_per_s=tuple(tps),
        engine_accept_len=tuple(timed["accept_len"][2:]),
        decode_accept_len=tuple(c.decode_accept_len for c in picked),
        predicted_speedup=tuple(c.speedups[0] for c in picked),
        measured_speedup=tuple(t / plain for t in tps),
        plain_tokens_per_s=plain,
        chain_depth=choice.chain_depth,
        chain_tokens_per_s=chain,
        chain_predicted_speedup=choice.chain_speedup,
        greedy_mismatches=timed["greedy_mismatches"],
    )


def _hf_runs(target, tokenizer, family, drafter, config: MeasureSpeedupConfig) -> tuple[HFRun, ...]:
    """The same held-out prompts through HF generate, and HF assisted generation with a draft model."""
    evaluation, validation = config.evaluation, config.validation
    return hf_comparison(
        target,
        validation_prompts(tokenizer, evaluation, validation, config.seed),
        new_tokens=validation.new_tokens or evaluation.continuation_len,
        temperature=evaluation.temperatures[0],
        pad=pad_id(tokenizer),
        seed=config.seed,
        assistant=family.hf_assistant(drafter),
        max_depth=evaluation.max_depth,
    )
