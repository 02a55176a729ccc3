"""How each serving engine, at a given release, reads a speculative config: the depth it drafts
at a batch size, or the error it stops with. Written from the engines' own code, apart from
specfleet's emitters, so that tests can hold what is emitted to what the engine will do.

- vLLM: `SpeculativeConfig` (vllm/config/speculative.py) and the dynamic-depth lookup
  (vllm/v1/spec_decode/dynamic/utils.py), releases 0.10.2-0.33.0, with the model runner that
  serves a dense target by default (vllm/config/vllm.py `use_v2_model_runner`).
- SGLang: server flags and the adaptive-steps routing (sglang/srt/speculative/
  adaptive_spec_params.py), releases 0.5.5-0.5.23.
- TensorRT-LLM: `DecodingBaseConfig` and `draft_len_schedule` (tensorrt_llm/llmapi/llm_args.py).
- transformers: the assistant's generation config in assisted generation.
- DFlash block drafters in all three serving engines: the depth verified as above, and the block
  the drafter fills (`vllm_dflash_block`, `sglang_dflash_block`, `trtllm_dflash_block`).
A config the engine starts with but runs badly raises Misbehaves; one it refuses, Refused.
"""

from __future__ import annotations

import bisect
import json
import shlex
from pathlib import Path

import yaml
from packaging.version import Version


class Refused(Exception):
    """The engine stops at start-up with this error."""


class Misbehaves(Exception):
    """The engine starts with this config but serves it badly, as the message says."""


def vllm(arg: str, version: str, batch_size: int) -> tuple[str, int]:
    """(method the engine runs, tokens drafted at this batch size) for `--speculative-config JSON`."""
    v = Version(version)
    flag, blob = shlex.split(arg)
    assert flag == "--speculative-config"
    config = json.loads(blob)
    known = {"method", "model", "num_speculative_tokens"}
    if v >= Version("0.24.0"):
        known.add("num_speculative_tokens_per_batch_size")
    if v >= Version("0.21.0"):
        known.add("draft_sample_method")
    unknown = set(config) - known
    if unknown and v >= Version("0.16.0"):
        raise Refused(f"Extra inputs are not permitted: {sorted(unknown)}")
    config = {k: x for k, x in config.items() if k in known}  # older releases drop what they do not know
    method, model = config.get("method"), config["model"]
    if method is None:
        method = "draft_model" if v >= Version("0.17.0") else None
    if method == "dflash" and v < Version("0.20.0"):
        raise Refused("Input should be 'ngram', 'eagle', 'eagle3', ... [type=literal_error, input_value='dflash']")
    if method not in ("eagle", "eagle3", "dflash"):  # a path that names an EAGLE head is served as one
        if "eagle-" in model.lower():
            method = "eagle"
        elif "eagle3" in model.lower():
            method = "eagle3"
    if method is None or method == "draft_model" and v < Version("0.15.0"):
        raise Refused("draft model speculative decoding is not supported")
    k_max = config["num_speculative_tokens"]
    if not isinstance(k_max, int) or k_max <= 0:
        raise Refused("num_speculative_tokens must be > 0")
    ranges = config.get("num_speculative_tokens_per_batch_size")
    if ranges is None:
        return method, k_max
    ignores_ranges = _v2_drafts_every_token(method, v)
    ranges = sorted((tuple(r) for r in ranges), key=lambda r: r[0])
    if any(len(r) != 3 or r[0] <= 0 or r[1] < r[0] or r[2] < 0 for r in ranges) or ranges[0][0] != 1:
        raise Refused("bad num_speculative_tokens_per_batch_size")
    if any(b[0] <= a[1] for a, b in zip(ranges, ranges[1:])):
        raise Refused("ranges must be non-overlapping and sorted")
    k = ranges[0][2]
    for lo, _, depth in ranges:  # the last range starting at or below B; a gap or a size past the end keeps its K
        if lo <= batch_size:
            k = depth
    return method, k_max if ignores_ranges else min(k, k_max)


def _v2_drafts_every_token(method: str, v: Version) -> bool:
    """Whether the V2 model runner serves this method here and its speculator drafts
    num_speculative_tokens every step, whatever the step's K. The V2 runner takes per-batch-size
    ranges from 0.25.0 (0.24 falls back to V1 for them) and serves draft models from 0.31.0; its
    EAGLE speculator reads the step's K from 0.32.0 (`num_spec_tokens_to_schedule` in
    v1/worker/gpu/model_runner.py), its draft-model speculator never (seen on 0.32.0: 1.00 tokens
    per draft in a K=0 range)."""
    if method == "draft_model":
        return v >= Version("0.31.0")
    return Version("0.25.0") <= v < Version("0.32.0")


def vllm_dflash_block(arg: str, version: str, batch_size: int) -> int:
    """The block a DFlash drafter fills at this batch size, [last token, mask x N]: N is the step's K
    under the V1 proposer (v1/spec_decode/dflash.py; the runner before 0.25.0, and in 0.24 for
    ranges), `num_speculative_tokens` under the V2 speculator (v1/worker/gpu/spec_decode/dflash/,
    the default runner from 0.25.0, which from 0.32.0 drops the drafts past K)."""
    v = Version(version)
    config = json.loads(shlex.split(arg)[1])
    method, k = vllm(arg, version, batch_size)
    assert method == "dflash", method
    if v >= Version("0.25.0"):
        return 1 + config["num_speculative_tokens"]
    return 1 + k


def vllm_cuda_graphs(arg: str, version: str) -> str:
    """The CUDA-graph mode a decode step runs in: with per-batch-size ranges the V1 model runner
    overrides full graphs to PIECEWISE (`_maybe_override_dynamic_sd_cudagraph_mode`); the V2
    runner, which serves ranges from 0.25.0 (draft models from 0.31.0), captures full graphs per K."""
    v = Version(version)
    config = json.loads(shlex.split(arg)[1])
    if not config.get("num_speculative_tokens_per_batch_size") or v < Version("0.24.0"):
        return "FULL_AND_PIECEWISE"
    v2 = v >= Version("0.31.0") if config.get("method") == "draft_model" else v >= Version("0.25.0")
    return "FULL_AND_PIECEWISE" if v2 else "PIECEWISE"


def drafts_at_depth_zero(engine: str, version: str) -> bool:
    """Whether a batch size given no drafting still runs a drafter forward every step, so that
    it costs more than plain decoding. vLLM: every release with per-batch-size ranges (the
    proposer's first forward runs before it reads K, to keep the drafter's KV cache in step;
    vLLM issue 49548). SGLang: every release with 0-step ranges (0.5.14 on), whose worker runs
    draft-extend at 0 steps unless SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND is set."""
    v = Version(version)
    return {"vllm": v >= Version("0.24.0"), "sglang": v >= Version("0.5.14")}[engine]


def vllm_draft_sampling(arg: str, version: str) -> str | None:
    """How vLLM draws drafts at temperature > 0 under this config: "greedy" (argmax, verified with
    q one-hot), "probabilistic" (sampled from q), "gumbel" (0.21), or None before the setting existed."""
    v = Version(version)
    config = json.loads(shlex.split(arg)[1])
    if v < Version("0.21.0"):
        return None
    chosen = config.get("draft_sample_method", "greedy")
    allowed = ("greedy", "gumbel") if v < Version("0.22.0") else ("greedy", "probabilistic")
    if chosen not in allowed:
        raise Refused(f"draft_sample_method {chosen!r} not in {allowed}")
    return chosen


def sglang(
    flags: str, version: str, batch_size: int, *, files_root: Path | None = None, cuda_graph_bs: list[int] | None = None
) -> tuple[str, int]:
    """(algorithm, draft steps at this batch size) for a server command line's speculative flags.
    `cuda_graph_bs`: an explicit decode CUDA-graph capture list (--cuda-graph-bs[-decode])."""
    v = Version(version)
    args = shlex.split(flags)
    opts: dict[str, str | bool] = {}
    i = 0
    while i < len(args):
        if args[i] == "--speculative-adaptive":
            if v < Version("0.5.11"):
                raise Refused("unrecognized arguments: --speculative-adaptive")
            opts["adaptive"] = True
            i += 1
        else:
            opts[args[i].removeprefix("--")] = args[i + 1]
            i += 2
    algorithm = opts["speculative-algorithm"]
    if algorithm == "DFLASH":
        return algorithm, _sglang_dflash_tokens(opts, v) - 1
    steps, topk = int(opts["speculative-num-steps"]), int(opts["speculative-eagle-topk"])
    if topk == 1 and int(opts["speculative-num-draft-tokens"]) != steps + 1:
        raise AssertionError("the server would force num_draft_tokens to steps + 1")
    if not opts.get("adaptive") or algorithm not in ("EAGLE", "EAGLE3") or topk != 1:
        return algorithm, steps  # adaptive off (a warning for other algorithms): the static depth
    path = Path(opts["speculative-adaptive-config"])
    if files_root is not None:
        path = files_root / path.name
    config = json.loads(path.read_text())
    if v < Version("0.5.13"):
        steps_list = sorted(set(config.get("candidate_steps", [1, 3, 7])))
        if len(steps_list) < 2:
            raise Refused("candidate_steps needs at least two values")
        raise AssertionError("a flat candidate list: the depth follows acceptance at run time")
    slots = {}
    for key, entry in config.items():
        if not key.isdigit():
            continue
        cand = entry.get("candidate_steps")
        floor = 0 if v >= Version("0.5.14") else 1
        if not isinstance(cand, list) or not cand or not all(isinstance(s, int) and s >= floor for s in cand):
            raise Refused(f"BS {key}: bad candidate_steps {cand!r}")
        slots[int(key)] = sorted(set(cand))
    if not slots:
        raise Refused("the adaptive config needs an integer batch-size key")
    union = sorted({s for c in slots.values() for s in c})
    if v >= Version("0.5.14") and steps not in union:
        raise Refused(f"--speculative-num-steps={steps} is not in the adaptive candidate_steps {union}")
    explicit = cuda_graph_bs is not None
    if cuda_graph_bs is None and v < Version("0.5.14"):  # 0.5.13 routes by the default capture list
        cuda_graph_bs = _SGLANG_H100_CAPTURE

    def slot_of(size: int) -> list[int]:
        if cuda_graph_bs:
            graphs = sorted(cuda_graph_bs)
            at = bisect.bisect_left(graphs, size)
            size = graphs[at] if at < len(graphs) else size
        keys = sorted(slots)
        return slots[keys[max(0, bisect.bisect_right(keys, size) - 1)]]

    if Version("0.5.15") <= v < Version("0.5.19"):
        _sglang_logits_rows_fit(steps, union, slot_of, sorted(cuda_graph_bs) if explicit else None)
    slot = slot_of(batch_size)
    if len(slot) != 1:
        raise AssertionError(f"slot candidates {slot}: the depth follows acceptance at run time")
    return algorithm, slot[0]


_SGLANG_H100_CAPTURE = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8)]


def _sglang_dflash_tokens(opts: dict, v: Version) -> int:
    """The block a DFLASH server drafts and verifies (`_handle_dflash`, speculative_hook.py): steps
    and top-k forced to 1, adaptive mode switched off with a warning, the block
    --speculative-num-draft-tokens (the drafter's block_size where not given, which this reader
    does not see: it wants the flag)."""
    if v < Version("0.5.11"):
        raise Refused("argument --speculative-algorithm: invalid choice: 'DFLASH'")
    if "speculative-draft-model-path" not in opts:
        raise Refused("DFLASH speculative decoding requires setting --speculative-draft-model-path.")
    tokens = int(opts["speculative-num-draft-tokens"])
    if tokens <= 1:
        raise Refused("DFLASH block size must be greater than 1")
    return tokens


def sglang_dflash_block(flags: str, version: str) -> int:
    """The block a DFLASH drafter fills: whatever the drafter was trained on, the flag decides
    (a different block_size in the draft config only logs a warning in dflash_worker.py)."""
    args = shlex.split(flags)
    return _sglang_dflash_tokens(dict(zip((a.removeprefix("--") for a in args[0::2]), args[1::2])), Version(version))


def _sglang_logits_rows_fit(steps: int, candidates: list[int], slot_of, explicit: list[int] | None) -> None:
    """0.5.15-0.5.18 size the shared logits buffer for --speculative-num-draft-tokens (largest
    capture size x (steps + 1) rows at top-k 1), but build a CUDA-graph state for every adaptive
    candidate at start-up, each captured at the sizes routed to it (all of them without an
    explicit --cuda-graph-bs-decode): a candidate that needs more rows stops the server (SGLang
    issue 30549, fixed in 0.5.19)."""
    graphs = explicit or _SGLANG_H100_CAPTURE
    have = graphs[-1] * (steps + 1)
    for s in candidates:
        reach = [g for g in graphs if explicit is None or s in slot_of(g)]
        need = max(reach, default=0) * (s + 1)
        if need > have:
            raise Refused(f"shared logits buffer holds {have} rows but caller needs {need}")


def trtllm(text: str, version: str, batch_size: int) -> tuple[str, int]:
    """(decoding type, draft length at this batch size) for the LLM API options' YAML."""
    v = Version(version)
    spec = yaml.safe_load(text)["speculative_config"]
    kind = spec["decoding_type"]
    allowed = {"Eagle", "Draft_Target"} | ({"Eagle3"} if v >= Version("1.3.0rc0") else set())
    allowed |= {"DFlash"} if v >= Version("1.3.0rc14") else set()
    if kind not in allowed:
        raise Refused(f"unknown decoding_type {kind}")
    if kind == "DFlash":
        return kind, _trtllm_dflash(spec)
    fields = {"decoding_type", "max_draft_len", "speculative_model_dir"}
    if v >= Version("1.2.0"):
        fields.add("draft_len_schedule")
    if v >= Version("1.3.0rc0"):
        fields.add("speculative_model")
    if set(spec) - fields:
        raise Refused(f"Extra inputs are not permitted: {sorted(set(spec) - fields)}")
    top = spec["max_draft_len"]
    if not isinstance(top, int) or top <= 0:
        raise Refused("max_draft_len must be > 0")
    schedule = spec.get("draft_len_schedule")
    if schedule is None or kind in ("Eagle", "Eagle3") and v < Version("1.3.0rc8"):
        return kind, top  # before 1.3.0rc8 only the two-model (draft/target) path reads the schedule
    keys = sorted(schedule)
    if any(k < 1 for k in keys) or any(d < 0 or d > top for d in schedule.values()):
        raise Refused("draft_len_schedule keys >= 1, values in 0..max_draft_len")
    if v >= Version("1.3.0rc8"):  # inclusive upper bounds; larger batches draft nothing
        if schedule[keys[0]] != top:
            raise Refused("the smallest key's value must equal max_draft_len")
        at = bisect.bisect_left(keys, batch_size)
        depth = schedule[keys[at]] if at < len(keys) else 0
        if depth == 0:
            # the worker skips the drafter at draft length 0, so the drafter's KV cache misses those
            # positions and acceptance collapses once the batch shrinks (TensorRT-LLM PR 16888). Main
            # since floors Draft_Target at 1 (min_runtime_draft_len) and keeps Eagle3's drafter warm
            # at 0; no release read (to 1.4.0rc1) has either.
            raise Misbehaves(f"batch size {batch_size} drafts nothing: the drafter's KV cache goes stale")
        return kind, depth
    if 1 not in schedule or schedule[1] != top:  # lower bounds, key 1 required
        raise Refused("draft_len_schedule needs key 1 with the value max_draft_len")
    return kind, schedule[keys[bisect.bisect_right(keys, batch_size) - 1]]


def _trtllm_dflash(spec: dict) -> int:
    """DFlashDecodingConfig: mask_token_id and target_layer_ids default to the checkpoint's
    dflash_config; one draft length (draft_len_schedule reaches DFlash after the releases read)."""
    fields = {"decoding_type", "max_draft_len", "speculative_model", "mask_token_id", "target_layer_ids"}
    fields |= {"attention_backend", "draft_len_schedule"}
    if set(spec) - fields:
        raise Refused(f"Extra inputs are not permitted: {sorted(set(spec) - fields)}")
    if "draft_len_schedule" in spec:
        raise AssertionError("no release read schedules a DFlash drafter's length")
    top = spec["max_draft_len"]
    if not isinstance(top, int) or top <= 0:
        raise Refused("max_draft_len must be > 0")
    return top


def trtllm_dflash_block(text: str, checkpoint_block: int) -> int:
    """The block the DFlash worker drafts, max_draft_len + 1; past the checkpoint's trained block it
    stops at start-up (`_lazy_init_ctx_buffers`)."""
    top = yaml.safe_load(text)["speculative_config"]["max_draft_len"]
    if top + 1 > checkpoint_block:
        raise Refused(f"DFlash checkpoint was trained with block_size={checkpoint_block}. Lower max_draft_len")
    return top + 1


def transformers(text: str, batch_size: int) -> int:
    """Tokens the assistant drafts a round in HF assisted generation (one sequence at a time)."""
    if batch_size != 1:
        raise AssertionError("assisted generation decodes one sequence at a time")
    settings = json.loads(text)["assistant_generation_config"]
    if (
        settings.get("num_assistant_tokens_schedule", "constant") != "constant"
        or settings.get("assistant_confidence_threshold", 0.4) > 0
    ):
        raise AssertionError("the depth moves with acceptance at run time")
    return settings["num_assistant_tokens"]


# -- trees -----------------------------------------------------------------------------------------


def _parents_present(tree) -> None:
    nodes = set(tree)
    for node in tree:
        if len(node) > 1 and node[:-1] not in nodes:
            raise Refused(f"tree node {node} is not connected")


def vllm_tree(arg: str, version: str, env: dict | None = None) -> tuple:
    """The tree vLLM drafts under a config: its levels' sizes give each level's branching, the top
    ranks first; without `speculative_token_tree` (or without the TREE_ATTN backend), a chain."""
    import ast

    v = Version(version)
    parts = shlex.split(arg)
    config = json.loads(parts[1])
    backend = dict(zip(parts[2::2], parts[3::2])).get("--attention-backend") or (env or {}).get(
        "VLLM_ATTENTION_BACKEND"
    )
    if "--attention-backend" in parts and v < Version("0.14.0"):
        raise Refused("unrecognized arguments: --attention-backend")
    text = config.get("speculative_token_tree")
    k = config["num_speculative_tokens"]
    chain = tuple((0,) * d for d in range(1, k + 1))
    if text is None:
        return chain
    if v >= Version("0.21.0"):
        raise Refused("Extra inputs are not permitted: ['speculative_token_tree']")
    if v < Version("0.10.1") or backend != "TREE_ATTN":
        return chain  # declared but unused before 0.10.1; other backends draft a chain
    tree = sorted(ast.literal_eval(text), key=lambda n: (len(n), n))
    _parents_present(tree)
    sizes = [1] + [sum(1 for n in tree if len(n) == d) for d in range(1, max(map(len, tree)) + 1)]
    drafted, level = [], [()]
    for above, size in zip(sizes, sizes[1:]):
        width = size // above
        level = [p + (r,) for p in level for r in range(width)]
        drafted += level
    return tuple(drafted)


def sglang_tree(flags: str, version: str) -> tuple[int, int, int]:
    """(steps, top-k, draft tokens) the server runs with; it picks the nodes within them itself."""
    args = shlex.split(flags)
    opts = dict(zip(args[0::2], args[1::2]))
    steps, topk = int(opts["--speculative-num-steps"]), int(opts["--speculative-eagle-topk"])
    tokens = int(opts["--speculative-num-draft-tokens"])
    if topk == 1:
        tokens = steps + 1
    if tokens - 1 > topk + (steps - 1) * topk**2:
        raise Refused("selected index k out of range (torch.topk over the draft candidates)")
    return steps, topk, tokens


def trtllm_tree(text: str, version: str) -> tuple:
    """("static", tree) for eagle_choices, ("dynamic", depth, top-k, draft tokens) for a dynamic tree."""
    v = Version(version)
    spec = yaml.safe_load(text)["speculative_config"]
    static = {"eagle_choices", "eagle3_one_model"}
    dynamic = {"use_dynamic_tree", "dynamic_tree_max_topK", "max_total_draft_tokens"}
    allowed = {"decoding_type", "max_draft_len", "speculative_model_dir", "speculative_model"}
    if Version("1.2.0rc0") <= v < Version("1.4.0rc0"):
        allowed |= static
    if v >= Version("1.4.0rc0"):
        allowed |= dynamic
    if set(spec) - allowed:
        raise Refused(f"Extra inputs are not permitted: {sorted(set(spec) - allowed)}")
    if "eagle_choices" in spec:
        if spec.get("eagle3_one_model", True):
            raise AssertionError("the one-model path ignores eagle_choices: it drafts a chain")
        tree = sorted({tuple(n) for n in spec["eagle_choices"]}, key=lambda n: (len(n), n))
        _parents_present(tree)
        return "static", tuple(tree)
    if spec.get("use_dynamic_tree"):
        depth, topk, total = spec["max_draft_len"], spec["dynamic_tree_max_topK"], spec["max_total_draft_tokens"]
        if topk <= 0 or not depth <= total <= topk * depth:
            raise Refused("max_total_draft_tokens must lie between max_draft_len and topK x max_draft_len")
        return "dynamic", depth, topk, total
    raise AssertionError("no tree in this config")
