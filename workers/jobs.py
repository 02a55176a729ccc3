"""What each job kind does on a worker: a registry from kind to function.

Every function takes (config, inputs, *, num_gpus, progress) and returns a small result dict:
plain numbers and, for training jobs, the checkpoint as {file name: bytes} under "files".
`config` is exactly what the job's hash covers; `inputs` are the results of its dependencies.
"""
from __future__ import annotations

import torch

from pipeline.acceptance import choose_depth, depth_per_batch
from pipeline.emitters import schedule_from_choices
from pipeline.types import CostProfile, Curve, DepthChoice
from workers.device import hardware_id, pick_device, pick_dtype


def _target(config: dict, inputs: dict, device):
    from workers.target import load_target

    source = {"files": inputs["target"]["files"]} if "target" in inputs else {"hf": config["target_hf"]}
    return load_target(source, device=device, dtype=pick_dtype(config["dtype"], device))


def _drafter(config: dict, inputs: dict, target):
    """The drafter to measure: an EAGLE-3 module, or a standalone causal LM."""
    param = next(target.parameters())
    if config.get("drafter_kind", "eagle3") == "eagle3":
        from workers.train_drafter import load_drafter

        return load_drafter(inputs["drafter"]["files"], device=param.device, dtype=param.dtype)
    from workers.standalone import check_vocab
    from workers.target import load_target

    source = {"files": inputs["drafter"]["files"]} if "drafter" in inputs else {"hf": config["drafter_hf"]}
    model, _ = load_target(source, device=param.device, dtype=param.dtype, role="drafter")
    check_vocab(model, target)
    return model


def train_target(config: dict, inputs: dict, *, num_gpus: float, progress) -> dict:
    from workers.target import train_builtin_target

    pick_device(num_gpus)  # a GPU that was asked for must exist, even if tiny training runs on CPU
    files, metrics = train_builtin_target(builtin=config["builtin"], seed=config["seed"], progress=progress)
    return {"files": files, "metrics": metrics}


def train_drafter(config: dict, inputs: dict, *, num_gpus: float, progress) -> dict:
    device = pick_device(num_gpus)
    target, tokenizer = _target(config, inputs, device)
    d = config["drafter"]
    if d["kind"] == "standalone":
        from workers.standalone import train_standalone

        files, metrics = train_standalone(tokenizer=tokenizer, builtin=d["builtin"], seed=config["seed"],
                                          progress=progress)
    else:
        from workers.train_drafter import train_drafter as train

        files, metrics = train(target=target, tokenizer=tokenizer, variant=d, train=d["train"],
                               seed=config["seed"], device=device, progress=progress)
    return {"files": files, "metrics": metrics}


def measure_curve(config: dict, inputs: dict, *, num_gpus: float, progress) -> dict:
    from workers.measure import measure_curves

    device = pick_device(num_gpus)
    target, tokenizer = _target(config, inputs, device)
    drafter = _drafter(config, inputs, target)
    results = measure_curves(target=target, drafter=drafter, tokenizer=tokenizer, evaluation=config["evaluation"],
                             seed=config["seed"], standalone=config.get("drafter_kind") == "standalone")
    return {
        "curves": [curve.to_dict() for curve, _, _, _ in results],
        # aligned with curves; for bootstrap intervals
        "per_prompt": [prompts for _, _, prompts, _ in results],
        "walks": [walks for _, _, _, walks in results],
        "diagnostics": [
            {"condition": curve.condition, "temperature": curve.temperature, "depth": depth, "name": name,
             "value": value}
            for curve, rows, _, _ in results for depth, name, value in rows
        ] + [
            {"condition": curve.condition, "temperature": curve.temperature, "depth": k,
             "name": "decode_accept_len", "value": value}
            for curve, _, _, _ in results for k, value in enumerate(curve.decode_accept_len) if k >= 1
        ],
    }


def profile_cost(config: dict, inputs: dict, *, num_gpus: float, progress) -> dict:
    from workers.cost import profile_cost as profile

    device = pick_device(num_gpus)
    target, _ = _target(config, inputs, device)
    drafter = _drafter(config, inputs, target)
    c = config["cost"]
    cost = profile(target=target, drafter=drafter, context_len=c["context_len"], max_depth=config["max_depth"],
                   warmup=c["warmup"], repeats=c["repeats"], seed=config["seed"],
                   batch_sizes=tuple(c.get("batch_sizes", (1,))), standalone=config.get("drafter_kind") == "standalone")
    return {"cost": cost.to_dict()}


def select_depth(config: dict, inputs: dict, *, num_gpus: float, progress) -> dict:
    """The depth for the primary curve: the spec's first condition at its first temperature."""
    curve = Curve.from_dict(inputs["curve"]["curves"][0])
    per_prompt = inputs["curve"].get("per_prompt", [[]])[0]
    walks = inputs["curve"].get("walks", [[]])[0]
    cost = CostProfile.from_dict(inputs["cost"]["cost"])
    ratio = config["cost_ratio"] if config["cost_ratio"] is not None else cost.cost_ratio
    # the timed engine iteration, unless the spec overrides the cost ratio (cost tables from before
    # engine iterations were timed have none)
    if cost.pass_ms and len(cost.pass_ms) != len(curve.accept_len):
        raise ValueError(f"the cost table timed depths 0..{len(cost.pass_ms) - 1} but the curve has 0..{curve.max_depth}")
    timed = config["cost_ratio"] is None and bool(cost.pass_ms)
    pass_cost = cost.pass_cost if timed else None
    choice = choose_depth(curve, ratio, pass_cost=pass_cost, per_prompt=per_prompt or None, walks=walks or None,
                          seed=config.get("seed", 0))
    result = {"choice": choice.to_dict(), "hardware": cost.hardware, "condition": curve.condition,
              "temperature": curve.temperature}
    if cost.draft_ms_by_batch:  # the per-batch-size schedule, from the measured cost table
        by_batch = depth_per_batch(curve, cost, first=choice.depth)  # batch size 1 keeps the noise-aware choice
        result["batch_depths"] = {str(b): k for b, k in by_batch.items()}
        max_b = max(config.get("max_batch_size", max(by_batch)), max(by_batch))
        result["schedule"] = [list(r) for r in schedule_from_choices(by_batch, max_b)]
    return result


def measure_speedup(config: dict, inputs: dict, *, num_gpus: float, progress) -> dict:
    """The real engine at every depth, beside the speedup the depth choice predicted."""
    from workers.speedup import engine_speedups

    device = pick_device(num_gpus)
    target, tokenizer = _target(config, inputs, device)
    drafter = _drafter(config, inputs, target)
    selected = inputs["depth"]
    if (selected["condition"], selected["temperature"]) != (config["evaluation"]["conditions"][0],
                                                          config["evaluation"]["temperatures"][0]):
        raise ValueError("the depth choice was made for another condition or temperature than the one validated")
    measured = engine_speedups(target=target, drafter=drafter, tokenizer=tokenizer, evaluation=config["evaluation"],
                               validation=config["validation"], seed=config["seed"],
                               standalone=config.get("drafter_kind") == "standalone")
    choice = DepthChoice.from_dict(selected["choice"])
    tps = measured["tokens_per_s"]
    best = max(range(len(tps)), key=lambda k: tps[k])
    param = next(target.parameters())
    check = {
        **measured, "predicted_speedup": list(choice.speedups), "chosen_depth": choice.depth,
        "best_measured_depth": best, "chosen_vs_best": tps[choice.depth] / tps[best],
        "tolerance": config["validation"]["tolerance"],
        "hardware": hardware_id(param.device, param.dtype), "cost_hardware": selected["hardware"],
    }
    problems = []
    if check["chosen_vs_best"] < 1.0 - check["tolerance"]:
        problems.append(f"the chosen depth reaches {check['chosen_vs_best']:.1%} of the best measured tokens/s")
    if check["greedy_mismatches"]:
        problems.append(f"{check['greedy_mismatches']} prompt(s) decoded differently from plain greedy decoding")
    if check["hardware"] != check["cost_hardware"]:
        problems.append(f"costs were timed on {check['cost_hardware']}, the engine ran on {check['hardware']}")
    check["passed"], check["problems"] = not problems, problems
    return {"speedup_check": check}


JOBS = {
    "train_target": train_target,
    "train_drafter": train_drafter,
    "measure_curve": measure_curve,
    "profile_cost": profile_cost,
    "select_depth": select_depth,
    "measure_speedup": measure_speedup,
}


def run_job(kind: str, config: dict, inputs: dict, *, num_cpus: float, num_gpus: float, progress=None) -> dict:
    """Entry point of every job on a worker. Training losses come back as history.train_loss."""
    torch.set_num_threads(max(1, int(num_cpus)))
    torch.manual_seed(config.get("seed", 0))
    history: list[tuple[int, float]] = []

    def report(step: int, total: int, loss: float) -> None:
        if step % max(1, total // 100) == 0 or step == total:
            history.append((step, loss))
        if progress is not None:
            progress(step, total, loss)

    result = JOBS[kind](config, inputs, num_gpus=num_gpus, progress=report)
    if history:
        result["history"] = {"train_loss": history}
    return result
