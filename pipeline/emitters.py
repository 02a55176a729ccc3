"""Engine configs from a per-batch-size depth schedule (see pipeline/core/schedule.py).

The emitters turn a schedule into each engine's own format, and `check_*` functions hold
every emitted config to that engine's rules, as read from the engines' own source (vLLM's
speculative config, SGLang's server flags and adaptive-steps file, TensorRT-LLM's
`speculative_config`).
"""
from __future__ import annotations

import json
import shlex

import yaml

from pipeline.core.schedule import Range, check_schedule


def max_depth(schedule: list[Range]) -> int:
    return max(k for _, _, k in schedule)


def vllm_config(schedule: list[Range], *, method: str, model: str) -> dict:
    """vLLM `--speculative-config`: the maximum depth plus inclusive per-batch-size ranges."""
    return {
        "method": method,
        "model": model,
        "num_speculative_tokens": max_depth(schedule),
        "num_speculative_tokens_per_batch_size": [list(r) for r in schedule],
    }


def vllm_command_arg(config: dict) -> str:
    return "--speculative-config " + shlex.quote(json.dumps(config, separators=(",", ":")))


def sglang_flags(depth: int, *, model: str, algorithm: str = "EAGLE3") -> list[str]:
    """SGLang server flags for one static depth (chain drafting: top-k 1, k + 1 draft tokens)."""
    return [
        "--speculative-algorithm", algorithm,
        "--speculative-draft-model-path", model,
        "--speculative-num-steps", str(depth),
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", str(depth + 1),
    ]


def sglang_adaptive(schedule: list[Range], candidates: int = 3) -> dict:
    """SGLang's adaptive config: keys are batch-size LOWER bounds; candidate steps per range.

    Each range offers its chosen depth and up to `candidates - 1` smaller ones (0 = no speculation).
    """
    out = {}
    for lo, _, k in schedule:
        steps = sorted({max(0, k - i) for i in range(candidates)})
        out[str(lo)] = {"candidate_steps": steps}
    return out


def trtllm_config(schedule: list[Range], *, model: str, decoding_type: str = "Eagle3") -> dict:
    """TensorRT-LLM `speculative_config`: draft_len_schedule keys are inclusive UPPER bounds.

    Batch sizes above the last key draft nothing, so a trailing range of depth 0 is left out.
    The smallest key's value must equal max_draft_len (the first range has the largest depth
    when depth falls with batch size; otherwise the schedule is flattened to that rule).
    """
    ranges = list(schedule)
    while ranges and ranges[-1][2] == 0:
        ranges.pop()
    if not ranges:
        raise ValueError("the schedule never speculates: there is no TensorRT-LLM draft config to emit")
    top = ranges[0][2]
    return {
        "speculative_config": {
            "decoding_type": decoding_type,
            "max_draft_len": top,
            "speculative_model": model,
            "draft_len_schedule": {hi: min(k, top) for _, hi, k in ranges},
        }
    }


def trtllm_yaml(config: dict) -> str:
    return yaml.safe_dump(config, sort_keys=False)


def transformers_config(schedule: list[Range], *, model: str) -> dict:
    """Hugging Face assisted generation with a draft model: `generate(assistant_model=...)` reads
    the drafting settings from the assistant's own generation config. It decodes one sequence at
    a time, so the batch-size-1 depth is the one that applies; a constant schedule and no
    confidence cut-off make it draft exactly that many tokens a round, as the depth was tuned."""
    return {
        "assistant_model": model,
        "assistant_generation_config": {
            "num_assistant_tokens": schedule[0][2],
            "num_assistant_tokens_schedule": "constant",
            "assistant_confidence_threshold": 0.0,
        },
    }


# ---- the engines' rules, checked on every emitted config -----------------------------------

def check_vllm(config: dict) -> None:
    k_max = config["num_speculative_tokens"]
    if not isinstance(k_max, int) or k_max <= 0:
        raise ValueError("vllm: num_speculative_tokens must be a positive integer (the maximum depth)")
    schedule = [tuple(r) for r in config["num_speculative_tokens_per_batch_size"]]
    check_schedule(schedule)
    if any(k > k_max for _, _, k in schedule):
        raise ValueError("vllm: every scheduled depth must be <= num_speculative_tokens")
    if "tensor_parallel_size" in config:
        raise ValueError("vllm: use draft_tensor_parallel_size inside the speculative config")


def check_sglang_adaptive(config: dict) -> None:
    keys = [int(k) for k in config]
    if not keys or min(keys) != 1 or keys != sorted(keys):
        raise ValueError("sglang: adaptive keys are increasing batch-size lower bounds starting at 1")
    for value in config.values():
        steps = value["candidate_steps"]
        if not steps or any(s < 0 for s in steps) or steps != sorted(set(steps)):
            raise ValueError("sglang: candidate_steps must be distinct, sorted, >= 0")


def check_trtllm(config: dict) -> None:
    spec = config["speculative_config"]
    schedule = spec["draft_len_schedule"]
    keys = sorted(schedule)
    if not keys or list(schedule) != keys:
        raise ValueError("trtllm: draft_len_schedule keys must be increasing batch-size upper bounds")
    if schedule[keys[0]] != spec["max_draft_len"]:
        raise ValueError("trtllm: the value at the smallest key must equal max_draft_len")
    if any(v > spec["max_draft_len"] or v < 0 for v in schedule.values()):
        raise ValueError("trtllm: every scheduled draft length must lie in 0..max_draft_len")


def check_transformers(config: dict) -> None:
    settings = config["assistant_generation_config"]
    k = settings["num_assistant_tokens"]
    if not isinstance(k, int) or k <= 0:
        raise ValueError("transformers: num_assistant_tokens must be a positive integer (the batch-1 depth)")
    if settings["num_assistant_tokens_schedule"] != "constant" or settings["assistant_confidence_threshold"] != 0:
        raise ValueError("transformers: a tuned depth needs a constant schedule and no confidence cut-off")
