"""What runs inside vLLM's own Python environment: it checks engine configs with vLLM's own config
classes, and serves prompts with and without speculation, reporting vLLM's clock and counters.

vLLM pins its own transformers and torch, so it lives in an environment of its own, as it does in
production; specfleet starts this file there as a separate process (workers/serving/vllm_engine.py)
and reads one JSON answer from its standard output. The file imports the standard library and vLLM
only (never specfleet), and vLLM only when it runs.

Request (JSON on standard input):
- {"mode": "check", "model": PATH, "dtype": ..., "configs": [SPECULATIVE_CONFIG, ...]}: each config
  through `EngineArgs(...).create_engine_config()`; answer {"checked": [null | "first line of the
  refusal", ...]}. It checks the config's form and fields; what only a running engine checks (an
  overlapping per-batch-size schedule, a drafter folder that does not load) waits for `serve`.
- {"mode": "serve", "model": PATH, "dtype": ..., "max_model_len": N, "seed": S, "tensor_parallel_size": N,
  "speculative_config": null | {...}, "prompts": [[token ids], ...], "max_tokens": N, "batch_sizes":
  [1, 4, ...], "repeats": R}: one engine started; after a warm-up, at each batch size b every prompt
  is generated, b at a time (a last group short of b is filled from the first prompts), greedily,
  `max_tokens` new tokens each (end of sequence ignored, so every run decodes the same number of
  tokens), and that R times over. Answer {"start_s": ..., "batches": [{"batch_size": b, "seconds":
  ..., "group_seconds": [[s, ...] per repeat], "tokens": ..., "outputs": [[ids], ...], "drafts":
  ..., "draft_tokens": ..., "accepted": ..., "accepted_per_pos": [...]}, ...]}: seconds, tokens and
  outputs over every repeat (the outputs repeat after repeat), `group_seconds` one group of b
  prompts at a time, the counters vLLM's spec-decode counters over that batch size's runs alone
  (zero without speculation).

The answer goes to the file named by the first argument (vLLM writes its logs to standard output
and error). An engine that does not start raises, and the process exits non-zero; the caller reads
vLLM's own error from standard error. One engine per process: a process ends with its engine.
"""

from __future__ import annotations

import json
import sys
import time

COUNTERS = {
    "vllm:spec_decode_num_drafts": "drafts",
    "vllm:spec_decode_num_draft_tokens": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "accepted",
}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"


def _check(request: dict) -> dict:
    from vllm.engine.arg_utils import EngineArgs

    checked = []
    for config in request["configs"]:
        try:
            EngineArgs(
                model=request["model"], dtype=request["dtype"], enforce_eager=True, speculative_config=config
            ).create_engine_config()
            checked.append(None)
        except Exception as exc:  # noqa: BLE001 - every refusal is the answer, by its first line
            checked.append(f"{type(exc).__name__}: {_first_line(exc)}")
    return {"checked": checked}


def _counters(llm) -> dict:
    """vLLM's spec-decode counters now (cumulative since the engine started)."""
    out = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_pos": []}
    for metric in llm.get_metrics():
        if metric.name in COUNTERS:
            out[COUNTERS[metric.name]] = int(metric.value)
        elif metric.name == PER_POSITION:
            out["accepted_per_pos"] = [int(v) for v in metric.values]
    return out


def _since(now: dict, before: dict) -> dict:
    per_pos = [
        a - (before["accepted_per_pos"][i] if i < len(before["accepted_per_pos"]) else 0)
        for i, a in enumerate(now["accepted_per_pos"])
    ]
    return {**{k: now[k] - before[k] for k in ("drafts", "draft_tokens", "accepted")}, "accepted_per_pos": per_pos}


def _serve(request: dict) -> dict:
    from vllm import LLM, SamplingParams

    started = time.perf_counter()
    llm = LLM(
        model=request["model"],
        dtype=request["dtype"],
        speculative_config=request["speculative_config"],
        enforce_eager=request.get("enforce_eager", True),
        max_model_len=request["max_model_len"],
        seed=request["seed"],
        tensor_parallel_size=request.get("tensor_parallel_size", 1),  # the job's GPUs, for a split target
        disable_log_stats=False,
    )
    start_s = time.perf_counter() - started
    params = SamplingParams(temperature=0.0, max_tokens=request["max_tokens"], ignore_eos=True)
    prompts = [{"prompt_token_ids": ids} for ids in request["prompts"]]
    llm.generate(prompts[:1], params, use_tqdm=False)  # warm-up: the first pass pays one-off costs
    batches = []
    for size in request["batch_sizes"]:
        before = _counters(llm)
        outputs, group_seconds = [], []
        for _ in range(request.get("repeats", 1)):
            times = []
            for start in range(0, len(prompts), size):  # every prompt, `size` at a time (the last group cycles)
                group = [prompts[(start + j) % len(prompts)] for j in range(size)]
                t = time.perf_counter()
                outs = llm.generate(group, params, use_tqdm=False)
                times.append(time.perf_counter() - t)
                outputs += [list(o.outputs[0].token_ids) for o in outs]
            group_seconds.append(times)
        batches.append(
            {
                "batch_size": size,
                "seconds": sum(map(sum, group_seconds)),
                "group_seconds": group_seconds,
                "tokens": sum(len(o) for o in outputs),
                "outputs": outputs,
                **_since(_counters(llm), before),
            }
        )
    return {"start_s": start_s, "batches": batches}


def _first_line(exc: BaseException) -> str:
    """A refusal in one line: a pydantic validation error as its fields and messages (its own first
    line says only how many errors there are), anything else by its first line."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            return "; ".join(
                f"{'.'.join(str(p) for p in e.get('loc', ())) or 'config'}: {' '.join(str(e.get('msg')).split())}"
                for e in errors()
            )[:500]
        except Exception:  # noqa: BLE001 - not pydantic's errors(): fall back to the text
            pass
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), "")[:500]


def main() -> None:
    request = json.load(sys.stdin)
    answer = {"check": _check, "serve": _serve}[request["mode"]](request)
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        json.dump(answer, out)


if __name__ == "__main__":  # vLLM starts its engine in a spawned process, which imports this file again
    main()
