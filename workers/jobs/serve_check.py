"""serve_check: the serving engine itself serves the pairing as specfleet chose, and judges the choice.

The engine gets the pairing as workers/serving/pairing.py prepares it and starts once per config,
each on the same held-out prompts as the speedup check, decoding greedily at every profiled batch
size: without speculation, at every constant depth k = 1..max_depth, and with the config `specfleet
autotune --engine vllm` prints for the choice (the same emitter, for the engine's own release).
pipeline/core/serving_verdict.py judges what came back. A drafter the engine cannot load is
recorded as refused, with why, and nothing is run.
"""

from __future__ import annotations

from contextlib import ExitStack

from pipeline.autotune.choice_row import choice_row, sampling_of, schedule_of, tree_of
from pipeline.core.contracts import Selected, ServeCheckConfig, Served
from pipeline.core.serving_verdict import predictor, served_points, serving_verdict
from workers.runtime.device import hardware_id, pick_device, pick_dtype, target_gpus
from workers.serving.pairing import constant_sweep, engine_pairing


def run(config: ServeCheckConfig, inputs: dict, *, num_gpus: float, progress) -> Served:
    device = pick_device(num_gpus)
    selected: Selected = inputs["depth"]
    evaluation = config.evaluation
    if (selected.condition, selected.temperature) != (evaluation.conditions[0], evaluation.temperatures[0]):
        raise ValueError("the depth choice was made for another condition or temperature than the one served")
    curve = inputs["curve"].primary.curve
    cost = inputs["cost"].cost
    batch_sizes = sorted(selected.batch_depths) if selected.batch_depths else [1]
    row = choice_row(selected)
    chosen_schedule = schedule_of(row)
    stack = ExitStack()
    try:
        pairing = stack.enter_context(
            engine_pairing(config, inputs, batch_sizes=batch_sizes, device=device, gpus=target_gpus(num_gpus))
        )
    except ValueError as exc:  # a variant no stock engine runs
        return Served(serving_check=None, refused=str(exc).splitlines()[0])
    with stack:
        emitted = pairing.emitted(chosen_schedule, sampling_of(row), tree_of(row))
        sweep_configs = constant_sweep(pairing)
        refused = next((e for e in (emitted, *sweep_configs) if isinstance(e, str)), None)
        if refused is not None:
            return Served(serving_check=None, refused=refused)
        total, step = evaluation.max_depth + 2, 0

        def served(printed):
            nonlocal step
            answer = pairing.serve(printed)
            step += 1
            progress(step, total, float("nan"))  # no loss to show
            return answer

        plain = served(None)
        predict = predictor(selected, curve, cost)
        sweep = list(served_points(plain, plain, schedule=[(1, 1, 0)], predict=predict, curve=curve))
        for k, emitted_k in enumerate(sweep_configs, start=1):
            answer = served(emitted_k.text)
            sweep += served_points(answer, plain, schedule=[(1, 1, k)], predict=predict, curve=curve)
        if emitted is None:  # no speculation pays: the printed advice is to serve plain
            chosen, printed, notes = [p for p in sweep if p.depth == 0], "", ()
        else:
            printed, notes = emitted.text, emitted.notes
            chosen = served_points(served(printed), plain, schedule=chosen_schedule, predict=predict, curve=curve)
    check = serving_verdict(
        engine=f"{config.serving.engine} {config.serving.version}",
        speculative_config=printed,
        schedule=chosen_schedule,
        sweep=sweep,
        chosen=chosen,
        selected=selected,
        hardware=hardware_id(device, pick_dtype(config.target.dtype, device), target_gpus(num_gpus)),
        tolerance=config.serving.tolerance,
        notes=notes,
    )
    return Served(serving_check=check)
