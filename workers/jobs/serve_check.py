"""serve_check: the serving engine itself serves the pairing as specfleet chose, and judges the choice.

The target goes to the engine as a model folder (a built-in target's checkpoint, a GGUF file
converted once, or the given folder or hub id), the drafter as its family exports it for serving
(the EAGLE-3 layout, or a draft model's own folder; a drafter given by path or hub id as it is).
The engine then starts once per config, each on the same held-out prompts as the speedup check,
decoding greedily at every profiled batch size: without speculation, at every constant depth
k = 1..max_depth, and with the config `specfleet autotune --engine vllm` prints for the choice
(the same emitter, for the engine's own release). pipeline/core/serving_verdict.py judges what
came back. A drafter the engine cannot load is recorded as refused, with why, and nothing is run.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from pipeline.autotune.choice_row import choice_row, sampling_of, schedule_of, tree_of
from pipeline.autotune.engines.registry import EngineVersionError, emit
from pipeline.core.artifacts import folder_of
from pipeline.core.contracts import Selected, ServeCheckConfig, Served
from pipeline.core.serving_verdict import predictor, served_points, serving_verdict
from workers.drafters.registry import family_of
from workers.measure.speedup import validation_prompts
from workers.models.loading import load_tokenizer, served_folder
from workers.runtime.device import hardware_id, pick_device, pick_dtype
from workers.serving.vllm_engine import serve, speculative_config


def run(config: ServeCheckConfig, inputs: dict, *, num_gpus: float, progress) -> Served:
    device = pick_device(num_gpus)
    selected: Selected = inputs["depth"]
    evaluation, serving = config.evaluation, config.serving
    if (selected.condition, selected.temperature) != (evaluation.conditions[0], evaluation.temperatures[0]):
        raise ValueError("the depth choice was made for another condition or temperature than the one served")
    curve = inputs["curve"].primary.curve
    cost = inputs["cost"].cost
    dtype = pick_dtype(config.target.dtype, device)
    model = served_folder(config.target, inputs.get("target"))
    tokenizer = load_tokenizer(model)
    prompts = [p.tolist() for p in validation_prompts(tokenizer, evaluation, config.validation, config.seed)]
    batch_sizes = sorted(selected.batch_depths) if selected.batch_depths else [1]
    # every batch size decodes every prompt (b at a time); a batch larger than the prompts repeats them
    prompts = [prompts[i % len(prompts)] for i in range(max(len(prompts), *batch_sizes))]
    new_tokens = config.validation.new_tokens or evaluation.continuation_len
    family = family_of(config.drafter.kind)
    row = choice_row(selected)
    constant = [[(1, 1, k)] for k in range(1, evaluation.max_depth + 1)]  # the sweep's schedules
    with tempfile.TemporaryDirectory(prefix="specfleet-serve-") as tmp:
        try:
            drafter = _drafter_folder(family, config, inputs, Path(tmp) / "drafter")
        except ValueError as exc:  # a variant no stock engine runs
            return Served(serving_check=None, refused=str(exc).splitlines()[0])
        emitted = _emit(schedule_of(row), drafter, family.method, serving.version, sampling_of(row), tree_of(row))
        sweep_configs = [_emit(s, drafter, family.method, serving.version, None, None) for s in constant]
        refused = next((e for e in (emitted, *sweep_configs) if isinstance(e, str)), None)
        if refused is not None:
            return Served(serving_check=None, refused=refused)
        total = evaluation.max_depth + 2
        step = 0

        def served(spec_config):
            nonlocal step
            answer = serve(
                serving.python,
                model=model,
                dtype=str(dtype).removeprefix("torch."),
                speculative_config=spec_config,
                prompts=prompts,
                max_tokens=new_tokens,
                batch_sizes=batch_sizes,
                max_model_len=max(len(p) for p in prompts) + new_tokens + evaluation.max_depth + 8,
                seed=config.seed,
                cpu_threads=None if device.type == "cuda" else max(1, int(config.num_cpus)),
                kv_cache_gib=serving.kv_cache_gib,
                timeout_s=serving.start_timeout_s,
            )
            step += 1
            progress(step, total, 0.0)
            return answer

        plain = served(None)
        predict = predictor(selected, curve, cost)
        sweep = list(served_points(plain, plain, schedule=[(1, 1, 0)], predict=predict, curve=curve))
        for schedule, emitted_k in zip(constant, sweep_configs):
            answer = served(speculative_config(emitted_k.text))
            sweep += served_points(answer, plain, schedule=schedule, predict=predict, curve=curve)
        chosen_schedule = schedule_of(row)
        if emitted is None:  # no speculation pays: the printed advice is to serve plain
            chosen, printed, notes = [p for p in sweep if p.depth == 0], "", ()
        else:
            printed, notes = emitted.text, emitted.notes
            chosen = served_points(
                served(speculative_config(printed)), plain, schedule=chosen_schedule, predict=predict, curve=curve
            )
    check = serving_verdict(
        engine=f"{serving.engine} {serving.version}",
        speculative_config=printed,
        schedule=chosen_schedule,
        sweep=sweep,
        chosen=chosen,
        selected=selected,
        hardware=hardware_id(device, dtype),
        tolerance=serving.tolerance,
        notes=notes,
    )
    return Served(serving_check=check)


def _drafter_folder(family, config: ServeCheckConfig, inputs: dict, out: Path) -> str:
    """The drafter as the engine loads it: a trained one exported by its family, a given one as it is."""
    trained = inputs.get("drafter")
    if trained is not None:
        folder, _ = family.export(folder_of(trained), out)
        return folder
    given = getattr(config.drafter, "path", None) or getattr(config.drafter, "hf", None)
    if given is None:
        raise ValueError("the drafter has neither a trained checkpoint nor a path to serve")
    return given


def _emit(schedule, drafter: str, method: str, version: str, sampling, tree):
    """What autotune prints for `schedule` (None when no depth pays), or why the release refuses it."""
    if max(k for _, _, k in schedule) == 0 and not tree:
        return None
    try:
        return emit("vllm", schedule, model=drafter, method=method, version=version, draft_sampling=sampling, tree=tree)
    except EngineVersionError as exc:
        return f"{exc.option}: {exc}"
