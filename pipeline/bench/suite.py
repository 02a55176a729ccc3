"""`specfleet bench`: what specfleet costs to run and how close its answers get, measured side by side.

One run of a small experiment (experiments/bench.yaml, through `specfleet run` as a user runs it),
then, on its stored results and models, in this process:
- curve cost: the acceptance curve against a per-depth sweep and the lower bound (workers/measure/bench.py);
- engine: specfleet's engine against Hugging Face `generate` of the same target (the run's
  validation job timed both on the same held-out prompts);
- autotune: what choosing k cost (the curve, cost and select jobs) against brute force (the engine
  at every k, the sweep), and the regret of each choice in tokens/s on the held-out prompts;
- orchestration: tiny jobs through Ray, MLflow and the database against direct calls
  (pipeline/bench/orchestration.py);
- training: drafter training tokens/s per TTT depth and the target's share of it (workers/measure/bench.py);
- training groups: the drafter job in one process against groups of 1 and 2 Ray Train workers
  (pipeline/bench/groups.py).
Results go to bench.json and bench.md (pipeline/bench/table.py).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipeline.cli.common import workdir_stores
from pipeline.errors import UserError


def run_bench(
    *, spec: Path, workdir: Path, out: Path, jobs: int, ttt_depths: tuple[int, ...], train_steps: int, log=print
) -> dict:
    from db.store import Store
    from pipeline.bench.orchestration import orchestration_bench
    from pipeline.report.data import load_experiment
    from pipeline.spec import load_spec

    started = time.perf_counter()
    parsed, _ = load_spec(spec)
    run_s = _run_experiment(spec, workdir, log)
    store = Store(workdir_stores(workdir)[0])
    try:
        record = load_experiment(store, parsed.name)
        pairing = next((p for p in record.pairings if p.validated and p.profiled and p.measured), None)
        if pairing is None:
            raise UserError(f"{spec}: the bench needs a pairing with a validated depth (a validation section)")
        stored = _stored_inputs(store, record.id, pairing)
    finally:
        store.close()
    results = {
        "machine": _machine(),
        "experiment": {
            "name": parsed.name,
            "run_s": run_s,
            "pairing": pairing.label,
            "chosen_depth": pairing.selected.choice.depth,
        },
    }
    check = pairing.validated.speedup_check
    results["engine"] = _engine(check)
    log("bench: curve cost (curve, per-depth sweep, lower bound)")
    results["curve_cost"], results["training"] = _in_process(pairing, stored, ttt_depths, train_steps, log)
    results["autotune"] = _autotune(
        pairing, results["curve_cost"]["curve"]["seconds"], results["curve_cost"]["sweep"], check
    )
    results["training_groups"] = _groups(stored, train_steps, log)
    log(f"bench: orchestration ({jobs} jobs three ways)")
    fresh = Path(tempfile.mkdtemp(prefix="orchestration-", dir=workdir))  # nothing of an earlier bench is reused
    results["orchestration"] = orchestration_bench(
        fresh, jobs=jobs, measured=pairing.measured, profiled=pairing.profiled, log=log
    )
    results["seconds"] = time.perf_counter() - started
    from pipeline.bench.table import bench_tables

    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "bench.md").write_text("\n\n".join(t.markdown() for t in bench_tables(results)) + "\n")
    return results


def _run_experiment(spec: Path, workdir: Path, log) -> float:
    """`specfleet run` of the bench spec in its own process (its own local Ray cluster); a finished
    run is reused, so a second bench measures again without training again."""
    t0 = time.perf_counter()
    log(f"bench: specfleet run {spec} --workdir {workdir}")
    env = {k: v for k, v in os.environ.items() if k not in ("SPECFLEET_DB", "MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    # the bench's own stores in its work directory (MLflow's artifacts included), never $SPECFLEET_DB or a
    # shared MLflow: both variables are left out above, so `run` takes the work directory's defaults
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "run", str(spec), "--workdir", str(workdir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**env, "COLUMNS": "160"},
    )
    tail: list[str] = []
    for line in proc.stdout:
        tail = (tail + [line.rstrip()])[-20:]
        if line.startswith("[") or line.startswith("experiment "):
            log("  " + line.rstrip())
    if proc.wait() != 0:
        raise UserError(f"{spec}: the bench experiment failed (exit {proc.returncode}):\n" + "\n".join(tail))
    return time.perf_counter() - t0


def _stored_inputs(store, experiment_id: int, pairing) -> dict:
    """The typed configs and results (files by reference) of the jobs that made the pairing's models and
    its curve (the pairing's own, where the experiment has several)."""
    from pipeline.core.kinds import kind as job_kind
    from pipeline.report.data import member_name

    jobs = [
        j
        for j in store.experiment_results(experiment_id)
        if j["kind"] in ("train_target", "train_drafter", "regenerate", "target_features", "measure_curve")
    ]

    def ours(job) -> bool:
        config = job["config"]
        if job["kind"] == "measure_curve":
            return job["job_hash"] == pairing.jobs["measure_curve"]["job_hash"]
        if job["kind"] == "train_target":  # its config is the built-in target without its name; the plan's label has it
            return job["name"] == f"train_target {pairing.target}"
        if "drafter" in config:
            return member_name(config["drafter"]) == pairing.drafter
        return member_name(config["target"]) == pairing.target

    out = {}
    for job in jobs:
        if ours(job):
            kind = job_kind(job["kind"])
            out[job["kind"]] = (kind.config.model_validate(job["config"]), kind.result.model_validate(job["result"]))
    if "train_drafter" not in out or "measure_curve" not in out:
        raise UserError("the bench experiment stored no trained drafter or no curve")
    return out


def _in_process(pairing, stored: dict, ttt_depths, train_steps: int, log) -> tuple[dict, list[dict]]:
    import torch

    from workers.drafters.pairing import load_pairing
    from workers.measure.bench import curve_cost, training_speed

    config, drafter_result = stored["train_drafter"]
    torch.set_num_threads(2)  # as the run's timing jobs had it (profile_cost, measure_speedup: 2 CPUs each)
    device = torch.device("cpu")
    inputs = {"target": stored["train_target"][1] if "train_target" in stored else None, "drafter": drafter_result}
    target, tokenizer, family, drafter = load_pairing(config.target, config.drafter, inputs, device)
    curve_config = stored["measure_curve"][0]
    evaluation = curve_config.evaluation
    costs = pairing.profiled.cost
    pass_ms = costs.pass_ms or [costs.verify_ms + k * costs.draft_ms for k in range(evaluation.max_depth + 1)]
    cost = curve_cost(
        target=target,
        drafter=drafter,
        family=family,
        tokenizer=tokenizer,
        evaluation=evaluation,
        pass_ms=pass_ms,
        seed=curve_config.seed,
    )
    log(f"bench: training tokens/s at TTT depths {list(ttt_depths)}")
    data = stored.get("regenerate", (None, None))[1]
    features = stored.get("target_features", (None, None))[1]
    training = training_speed(
        target=target,
        tokenizer=tokenizer,
        spec=config.drafter,
        data=data,
        features=features,
        ttt_depths=ttt_depths,
        steps=train_steps,
        seed=config.seed,
        device=device,
    )
    return cost, training


def _groups(stored: dict, train_steps: int, log) -> list[dict]:
    """The drafter job's training, with the inputs it had, in one process and on worker groups."""
    from pipeline.bench.groups import group_training_speed

    config, _ = stored["train_drafter"]
    inputs = {
        name: stored[kind][1]
        for name, kind in (("target", "train_target"), ("data", "regenerate"), ("features", "target_features"))
        if kind in stored
    }
    return group_training_speed(config, inputs, steps=train_steps, cpus=2, log=log)


def _engine(check) -> dict:
    """tokens/s as HF generate's are counted: the tokens after the first over the seconds after the
    prompt's pass, summed over the validation prompts (the validation's own tokens/s is per pass)."""
    plain_hf = next((r.tokens_per_s for r in check.hf_runs if r.num_assistant_tokens is None), None)
    if plain_hf is None:
        raise UserError("the bench experiment's validation did not time HF generate (validation.compare_hf: true)")
    k = check.chosen_depth
    plain, chosen = check.tokens[0] / check.seconds[0], check.tokens[k] / check.seconds[k]
    return {
        "hf_plain_tokens_per_s": plain_hf,
        "engine_plain_tokens_per_s": plain,
        "engine_chosen_tokens_per_s": chosen,
        "chosen_depth": k,
        "engine_plain_over_hf": plain / plain_hf,
        "engine_chosen_over_hf": chosen / plain_hf,
        "engine_chosen_over_plain": chosen / plain,
    }


def _autotune(pairing, curve_s: float, sweep: dict, check) -> dict:
    """Choosing k from the curve and the cost profile against choosing it by brute force (the sweep's
    fastest depth), both judged by the validation's tokens/s on held-out prompts. The curve and the
    sweep are timed here, on the same positions with the models loaded; the cost profile and the
    choice are their jobs' durations (which include loading the models once)."""
    choose_s = curve_s + sum(
        (pairing.jobs.get(k) or {}).get("duration_s") or 0.0 for k in ("profile_cost", "engine_cost", "select_depth")
    )
    brute_s = sweep["seconds_all_depths"]
    brute_k = max(range(len(sweep["tokens_per_s"])), key=lambda k: sweep["tokens_per_s"][k])
    chosen, best = check.chosen_depth, max(check.tokens_per_s)
    return {
        "choose_s": choose_s,
        "brute_force_s": brute_s,
        "choose_over_brute_force": choose_s / brute_s,
        "chosen_depth": chosen,
        "brute_force_depth": brute_k,
        "best_held_out_depth": check.best_measured_depth,
        "chosen_regret": 1.0 - check.tokens_per_s[chosen] / best,
        "brute_force_regret": 1.0 - check.tokens_per_s[brute_k] / best,
        "chosen_tokens_per_s": check.tokens_per_s[chosen],
        "brute_force_tokens_per_s": check.tokens_per_s[brute_k],
        "best_tokens_per_s": best,
    }


def _machine() -> dict:
    import torch

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
