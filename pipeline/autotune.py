"""Autotune: a tuned config from the database (or from production metrics) as an engine config.

The drafter path in an emitted config must point at something the engine can load: by
default the pairing's trained drafter is exported once into the work directory (the EAGLE-3
layout for EAGLE drafters; the Hugging Face folder itself for standalone draft models), or
the user names a path with --drafter-path.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from pipeline import emitters
from pipeline.core.schedule import check_schedule
from pipeline.errors import UserError

ENGINES = ("vllm", "sglang", "trtllm", "transformers")


def schedule_of(row: dict) -> list[tuple[int, int, int]]:
    """The row's per-batch-size schedule, or its single depth for every batch size."""
    if row.get("schedule"):
        return [tuple(r) for r in row["schedule"]]
    return [(1, 1, row["depth"])]


def drafter_path(store, row: dict, workdir: Path, given: str | None, method: str = "eagle3") -> tuple[str, str]:
    """(path, vLLM method) for the row's drafter: the given path with the given method, or its
    family's export of the trained checkpoint (written once under workdir/exports)."""
    if given:
        return given, method
    from pipeline.record import finished

    job = row.get("drafter_job_hash")
    trained = finished(store, "train_drafter", job) if job else None
    if trained is None or trained.family is None:
        raise UserError(f"--drafter-path: no trained drafter checkpoint (with its family) is recorded for "
                        f"{row['target']}/{row['drafter']}; rerun its experiment or name the drafter's path")
    from workers.family import family_of  # torch, only when exporting

    try:
        family = family_of(trained.family)
    except ValueError as exc:
        raise UserError(f"--drafter-path: {exc}; name the drafter's path") from None
    try:
        return family.export(Path(trained.checkpoint_dir), workdir / "exports" / job)
    except ValueError as exc:  # a variant no stock engine runs
        raise UserError(f"--engine: {exc}; pass --drafter-path to a checkpoint the engine can run") from None
    except RuntimeError as exc:  # a checkpoint that cannot be read
        raise UserError(f"--drafter-path: {str(exc).splitlines()[0]}; rerun its experiment or name the "
                        "drafter's path") from None


def render(engine: str, schedule: list[tuple[int, int, int]], *, model: str, method: str) -> str:
    """The engine config as text, after checking every rule of that engine."""
    check_schedule(schedule)
    if max(k for _, _, k in schedule) == 0:
        raise UserError("--engine: speculation does not pay for this pairing on this hardware (depth 0 "
                        "at every batch size); serve without a drafter")
    if engine == "vllm":
        config = emitters.vllm_config(schedule, method=method, model=model)
        if len(schedule) == 1:
            del config["num_speculative_tokens_per_batch_size"]
        else:
            emitters.check_vllm(config)
        return emitters.vllm_command_arg(config)
    if engine == "sglang":
        depth = schedule[0][2]
        algorithm = "EAGLE3" if method == "eagle3" else "STANDALONE"
        flags = " ".join(emitters.sglang_flags(depth, model=model, algorithm=algorithm))
        if len(schedule) == 1:
            return flags
        adaptive = emitters.sglang_adaptive(schedule)
        emitters.check_sglang_adaptive(adaptive)
        return flags + "\n# adaptive per-batch-size steps:\n" + json.dumps(adaptive, indent=1)
    if engine == "trtllm":
        config = emitters.trtllm_config(schedule, model=model,
                                        decoding_type="Eagle3" if method == "eagle3" else "DraftTarget")
        emitters.check_trtllm(config)
        return emitters.trtllm_yaml(config)
    if engine == "transformers":
        if method != "draft_model":
            raise UserError("--engine transformers: HF assisted generation drafts with a standalone draft model; "
                            f"this drafter is {method} (use --engine vllm, sglang or trtllm)")
        if schedule[0][2] == 0:
            raise UserError("--engine transformers: the batch-size-1 depth is 0 (HF generate decodes one "
                            "sequence): speculation does not pay; generate without an assistant")
        config = emitters.transformers_config(schedule, model=model)
        emitters.check_transformers(config)
        return json.dumps(config, indent=1)
    raise UserError(f"--engine: unknown engine {engine!r}; use one of {', '.join(ENGINES)}")


def from_metrics(store, sources: list[str], *, model_name: str | None, drafter: str, cost_ratio: float | None,
                 hardware: str | None, temperature: float, code_version: str) -> tuple[dict, str]:
    """Production acceptance -> a new active 'production' tuned config. Returns (row, drift report)."""
    from pipeline.core.choice import choose_depth
    from pipeline.prod_metrics import parse_counters, production_curve, read_source, window

    if not 1 <= len(sources) <= 2:
        raise UserError("--from-metrics: give one scrape (totals since start) or two (a window)")
    scrapes = [parse_counters(read_source(s), model_name) for s in sources]
    counters = window(*scrapes) if len(scrapes) == 2 else scrapes[0]
    target = counters.model_name or model_name
    if not target:
        raise UserError("--model: the metrics carry no model_name label; name the target")
    curve = production_curve(counters, temperature=temperature)
    offline = [r for r in store.best(target=target, drafter=drafter)
               if r["source"] == "offline" and hardware in (None, r["hardware"])]
    pass_cost, cost_note = None, f"Leviathan's model at c = {cost_ratio}"
    if cost_ratio is None:
        if not offline:
            raise UserError(f"--cost-ratio: no stored cost table for {target}/{drafter}; give the ratio")
        cost_ratio = offline[0]["cost_ratio"]
        hardware = hardware or offline[0]["hardware"]
        curve, pass_cost, cost_note = _timed_passes(offline[0], curve, cost_ratio)
    choice = choose_depth(curve, cost_ratio, pass_cost=pass_cost)
    version = store.add_production_config(
        target=target, drafter=drafter, hardware=hardware or "production", condition=curve.condition,
        temperature=temperature, depth=choice.depth, accept_len=choice.accept_len, speedup=choice.speedup,
        cost_ratio=cost_ratio, code_version=code_version, decode_accept_len=choice.decode_accept_len,
        cost_model=choice.cost_model, pass_cost=list(pass_cost) if pass_cost is not None else None,
        notes=f"from {int(counters.num_drafts)} verified drafts of {len(curve.survival)} positions; {cost_note}",
    )
    row = {"target": target, "drafter": drafter, "depth": choice.depth, "schedule": None, "version": version}
    return row, _drift_report(store, target, drafter, curve)


def _timed_passes(row: dict, curve, cost_ratio: float):
    """(curve, pass_cost, note): the pass costs the offline choice used, as stored with its tuned
    config; depths beyond those timed are dropped. Leviathan's model at the stored ratio when the
    offline choice used that (or recorded no cost model)."""
    pass_cost = row.get("pass_cost")
    if row.get("cost_model") != "timed" or not pass_cost or len(pass_cost) < 2:
        return curve, None, f"Leviathan's model at the stored c = {cost_ratio:.3f}"
    depth = min(curve.max_depth, len(pass_cost) - 1)
    cut = dataclasses.replace(curve, cond_accept=curve.cond_accept[:depth], survival=curve.survival[:depth],
                              accept_len=curve.accept_len[: depth + 1])
    return cut, list(pass_cost[: depth + 1]), "the offline choice's timed engine iterations"


def _drift_report(store, target: str, drafter: str, curve) -> str:
    """How far production survival has moved from the offline curve, per depth both have."""
    rows = store.curve_rows(target=target, drafter=drafter)
    offline = {r["depth"]: r["survival"] for r in rows if r["temperature"] == min(x["temperature"] for x in rows)} \
        if rows else {}
    if not offline:
        return f"no offline curve for {target}/{drafter}: nothing to compare production with"
    diffs = [(j, s - offline[j]) for j, s in enumerate(curve.survival, start=1) if j in offline]
    worst = max(diffs, key=lambda d: abs(d[1]))
    text = ", ".join(f"j={j}: {d:+.3f}" for j, d in diffs)
    return f"production survival minus offline: {text} (largest at depth {worst[0]})"
