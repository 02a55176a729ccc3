"""engine_cost: a pairing's cost table timed by the serving engine itself (`cost.timed_by: vllm`).

The engine gets the pairing as workers/serving/pairing.py prepares it and starts once per constant
depth k = 0..max_depth (0: no speculation), each decoding the speedup check's held-out prompts
greedily at every profiled batch size; pipeline/core/engine_costs.py turns its clock and
spec-decode counters into the cost table the depth choice reads, marked with the engine's release.
A drafter the engine cannot load fails the job with why: it cannot be timed there.
"""

from __future__ import annotations

from contextlib import ExitStack

from pipeline.core.contracts import EngineCostConfig, Profiled
from pipeline.core.engine_costs import engine_cost_profile
from workers.runtime.device import hardware_id, pick_device, pick_dtype, target_gpus
from workers.serving.pairing import constant_sweep, engine_pairing


def run(config: EngineCostConfig, inputs: dict, *, num_gpus: float, progress) -> Profiled:
    device = pick_device(num_gpus)
    serving = config.serving
    stack = ExitStack()
    try:
        pairing = stack.enter_context(
            engine_pairing(
                config, inputs, batch_sizes=list(config.cost.batch_sizes), device=device, gpus=target_gpus(num_gpus)
            )
        )
    except ValueError as exc:  # a variant no stock engine runs
        raise ValueError(f"{serving.engine} {serving.version} cannot time this drafter: {exc}") from None
    with stack:
        configs = constant_sweep(pairing)
        refused = next((e for e in configs if isinstance(e, str)), None)
        if refused is not None:
            raise ValueError(f"{serving.engine} {serving.version} cannot time this drafter: {refused}")
        printed = [None, *(e.text for e in configs)]
        answers = []
        for k, text in enumerate(printed):
            answers.append(pairing.serve(text))
            progress(k + 1, len(printed), float("nan"))  # no loss to show
    cost = engine_cost_profile(
        answers,
        hardware=hardware_id(device, pick_dtype(config.target.dtype, device), target_gpus(num_gpus)),
        timed_by=f"{serving.engine} {serving.version}",
    )
    return Profiled(cost=cost)
