"""measure_curve: acceptance versus depth (and drift diagnostics) under every evaluation condition."""

from __future__ import annotations

from pipeline.core.contracts import DiagnosticValue, MeasureCurveConfig, Measured, MeasuredCurve
from workers.data.prompts import prompt_categories
from workers.drafters.pairing import load_pairing
from workers.measure.curves import measure_curves
from workers.runtime.device import pick_device, split_gpus


def run(config: MeasureCurveConfig, inputs: dict, *, num_gpus: float, progress) -> Measured:
    device = pick_device(num_gpus)
    target, tokenizer, family, drafter = load_pairing(
        config.target, config.drafter, inputs, device, split_gpus(num_gpus)
    )
    evaluation = config.evaluation if family.drafts_trees else config.evaluation.model_copy(update={"tree_topk": 0})
    results = measure_curves(
        target=target, drafter=drafter, family=family, tokenizer=tokenizer, evaluation=evaluation, seed=config.seed
    )
    return Measured(
        curves=tuple(
            MeasuredCurve(curve=curve, per_prompt=prompts, walks=walks, rank_paths=paths)
            for curve, _, prompts, walks, paths in results
        ),
        rank_topk=evaluation.tree_topk,
        diagnostics=tuple(
            DiagnosticValue(
                condition=curve.condition, temperature=curve.temperature, depth=depth, name=name, value=value
            )
            for curve, rows, *_ in results
            for depth, name, value in rows
        ),
        categories=prompt_categories(config.evaluation.prompts, config.evaluation.num_prompts, config.seed),
    )
