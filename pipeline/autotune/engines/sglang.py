"""SGLang: server flags, and for a per-batch-size depth the adaptive-steps file.

As read in the released wheels 0.5.5 to 0.5.23 (`sglang/srt/server_args.py`, from 0.5.14
`sglang/srt/arg_groups/speculative_hook.py`, and `sglang/srt/speculative/adaptive_spec_params.py`):
- `--speculative-algorithm EAGLE3 | STANDALONE`, `--speculative-draft-model-path`,
  `--speculative-num-steps`, `--speculative-eagle-topk`, `--speculative-num-draft-tokens`
  (with top-k 1 the draft tokens are steps + 1): one depth at every batch size.
- `--speculative-adaptive --speculative-adaptive-config FILE` from 0.5.11. In 0.5.11-0.5.12 the
  file holds one flat `candidate_steps` list (two values at least) that the server moves along
  by a running average of acceptance, so it cannot hold a chosen depth per batch size. From
  0.5.13 its integer keys are batch-size lower bounds, each with its own `candidate_steps`: a
  batch is padded up to the next CUDA-graph capture size, then takes the slot with the largest
  key at or below that. One candidate pins the slot's depth (several make the chosen depth a
  range the policy moves in). A candidate of 0 (no drafting) is accepted from 0.5.14, where
  `--speculative-num-steps` must also be one of the candidates.
- At 0 steps the worker still runs draft-extend each step, keeping the drafter's KV cache warm
  (`eagle_worker_v2.py`; SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND skips it and leaves the cache
  stale): such a range costs more than plain decoding, noted.
- 0.5.15-0.5.18 size the shared logits buffer (`model_executor/graph_shared_output.py`) for
  `--speculative-num-draft-tokens` but capture a CUDA-graph state for every adaptive candidate at
  start-up: a candidate above `--speculative-num-steps` stops the server (issue 30549, fixed in
  0.5.19, PR 35275). The steps and draft tokens are written from the schedule's largest depth.
- The router pads a batch size up to the next CUDA-graph capture size before it picks the slot.
  In 0.5.13 that is the default capture list (1-8, 10-32 by 2, 40-64 by 4, 72-256 by 8, then by
  16), so a range must end on a capture size; from 0.5.14 only an explicit
  `--cuda-graph-bs-decode` list pads, so give none, or one holding every range's upper end.
- Adaptive mode runs for EAGLE and EAGLE3 with top-k 1 only; for any other algorithm
  (STANDALONE included) the server logs a warning and runs the static depth.
- Trees (top-k > 1): each of `--speculative-num-steps` drafting steps expands the top-k best
  branches by their top-k children, scored by the drafter's cumulative probability, and the best
  num_draft_tokens - 1 of all of them are verified. SGLang picks those nodes itself, so the flags
  bound the tree (its depth, branching and size) rather than fix it; at most
  topk + (steps - 1) * topk^2 nodes can be picked. Adaptive mode is switched off with top-k > 1.
- DFlash drafters (`--speculative-algorithm DFLASH`, from 0.5.11, pull request 22077: read from the
  released packages, 0.5.10.post1 has no DFLASH): `--speculative-num-draft-tokens` is the block the
  drafter fills and the target verifies, [last token, mask x K], so K + 1 for a depth of K; the
  steps and top-k are forced to 1. A block other than the drafter's trained `block_size` only
  logs a warning (`dflash_worker.py`), so a depth below block_size - 1 drafts a shorter block than
  the trained one (noted unless the curve was measured so, `block_drafting: depth`). Adaptive mode
  is switched off for DFLASH with a warning (`adaptive_unsupported_reason`): one depth at every
  batch size.
"""

from __future__ import annotations

import hashlib
import json
import shlex

from packaging.version import Version

from pipeline.autotune.engines.common import (
    Emitted,
    at_least,
    batch1,
    constant,
    not_written,
    one_block_depth,
    tree_blocker,
    unset_sampling,
)
from pipeline.core.schedule import Range
from pipeline.core.trees import check_tree, shape
from pipeline.core.words import counted

NAME = "sglang"
OLDEST, NEWEST = "0.5.5", "0.5.23"
DEFAULT_VERSION = NEWEST
PER_BATCH_SIZE = "0.5.13"
ZERO_STEPS = "0.5.14"  # also the first release whose router pads only to an explicit capture list
DFLASH = "0.5.11"


def default_capture_sizes(largest: int = 512) -> list[int]:
    """SGLang's default decode CUDA-graph batch sizes with speculative decoding (0.5.13-0.5.23)."""
    return [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8), *range(272, largest + 1, 16)]


def emit(
    schedule: list[Range],
    *,
    model: str,
    method: str,
    version: Version,
    config_dir: str,
    draft_sampling: str | None = None,
    tree=None,
    block_size: int | None = None,
    block_drafting: str = "trained",
) -> Emitted:
    """Flags, and with a depth per batch size the adaptive file they name in `config_dir`; with a
    `tree`, the steps, top-k and draft tokens that bound it. `block_size`: a DFlash drafter's
    trained block (None: not known here)."""
    if method == "dflash":
        return _emit_dflash(schedule, model, version, draft_sampling, tree, block_size, block_drafting)
    algorithm = "EAGLE3" if method == "eagle3" else "STANDALONE"
    notes = tree_notes = ()
    if tree:
        sh = shape(check_tree(tree))
        why = tree_blocker(NAME, tree, schedule, method) or (
            None
            if sh.nodes <= sh.topk + (sh.depth - 1) * sh.topk**2
            else "SGLang verifies at most top-k + (steps - 1) x top-k^2 = "
            f"{sh.topk + (sh.depth - 1) * sh.topk**2} nodes"
        )
        if why is None:
            flags = [
                "--speculative-algorithm",
                algorithm,
                "--speculative-draft-model-path",
                model,
                "--speculative-num-steps",
                str(sh.depth),
                "--speculative-eagle-topk",
                str(sh.topk),
                "--speculative-num-draft-tokens",
                str(sh.nodes + 1),
            ]
            return Emitted(
                text=" ".join(shlex.quote(f) for f in flags),
                tree_written=True,
                notes=(
                    f"sglang: the server picks the {counted(sh.nodes, 'draft token')} itself by the drafter's "
                    f"cumulative scores, within {sh.depth} steps and top-{sh.topk}; the tree it drafts may differ "
                    "from the one measured",
                    "sglang: with a paged KV cache (page size > 1) top-k > 1 needs the flashinfer, fa3 or triton "
                    "attention backend",
                ),
            )
        tree_notes = not_written(NAME, version, tree, why)
    if not constant(schedule):
        why = _no_schedule(schedule, algorithm, version)
        if why:
            option = "--engine-version" if algorithm == "EAGLE3" else "--engine"  # no release helps a draft model
            schedule, notes = batch1(schedule, NAME, version, why, option)
    depth = max(k for _, _, k in schedule)  # the largest candidate: 0.5.15-0.5.18 size a buffer by it
    flags = [
        "--speculative-algorithm",
        algorithm,
        "--speculative-draft-model-path",
        model,
        "--speculative-num-steps",
        str(depth),
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        str(depth + 1),
    ]
    files = {}
    if not constant(schedule):
        adaptive = {str(lo): {"candidate_steps": [k]} for lo, _, k in schedule}
        text = json.dumps(adaptive, indent=1) + "\n"
        name = f"sglang-adaptive-{hashlib.sha256(text.encode()).hexdigest()[:12]}.json"
        files[name] = text
        flags += ["--speculative-adaptive", "--speculative-adaptive-config", f"{config_dir.rstrip('/')}/{name}"]
        if at_least(version, ZERO_STEPS):
            ends = ", ".join(str(hi) for _, hi, _ in schedule[:-1])
            notes += (
                f"sglang: pass no --cuda-graph-bs-decode, or one that lists {ends}: the server pads a batch to "
                "that list before it picks the depth",
            )
        zero = [f"{lo}-{hi}" for lo, hi, k in schedule if k == 0]
        if zero:
            notes += (
                f"sglang: batch sizes {', '.join(zero)} (0 steps) still run the drafter's draft-extend pass each "
                "step to keep its KV cache warm, so they cost more than plain decoding",
            )
    notes += unset_sampling(NAME, draft_sampling)
    return Emitted(text=" ".join(shlex.quote(f) for f in flags), files=files, notes=tree_notes + notes)


def _no_schedule(schedule: list[Range], algorithm: str, version: Version) -> str | None:
    """Why this release cannot run the schedule as chosen, or None when it can."""
    if not at_least(version, PER_BATCH_SIZE):
        return f"a depth per batch size arrived in {PER_BATCH_SIZE} (earlier adaptive mode moves along one list)"
    if algorithm != "EAGLE3":
        return "adaptive mode runs only for EAGLE drafters; the server ignores it for STANDALONE draft models"
    if not at_least(version, ZERO_STEPS):
        if any(k == 0 for _, _, k in schedule):
            return f"a batch-size range with no drafting (0 steps) arrived in {ZERO_STEPS}"
        capture = default_capture_sizes()
        off = [hi for _, hi, _ in schedule[:-1] if hi not in capture]
        if off:
            return (
                f"this release pads a batch to its CUDA-graph capture size before it picks the depth, and "
                f"batch sizes {off} end a range without being capture sizes"
            )
    return None


DFLASH_RULES = {  # how the server runs a DFlash drafter (common.one_block_depth)
    "since": DFLASH,
    "method": "--speculative-algorithm DFLASH",
    "no_schedule": "adaptive mode runs only for EAGLE drafters; the server ignores it for DFLASH",
    "block": "--speculative-num-draft-tokens",
}


def _emit_dflash(
    schedule: list[Range],
    model: str,
    version: Version,
    draft_sampling: str | None,
    tree,
    block_size: int | None,
    block_drafting: str,
) -> Emitted:
    depth, notes = one_block_depth(NAME, version, schedule, tree, block_size, DFLASH_RULES, block_drafting)
    flags = [
        "--speculative-algorithm",
        "DFLASH",
        "--speculative-draft-model-path",
        model,
        "--speculative-num-draft-tokens",
        str(depth + 1),
    ]
    notes += unset_sampling(NAME, draft_sampling)
    return Emitted(text=" ".join(shlex.quote(f) for f in flags), notes=notes)
