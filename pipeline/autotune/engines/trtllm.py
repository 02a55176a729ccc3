"""TensorRT-LLM: the `speculative_config` section of the LLM API options (YAML for
`trtllm-serve --config`), parsed into a `DecodingBaseConfig` subclass chosen by
`decoding_type`. The models forbid unknown keys.

As read in `tensorrt_llm/llmapi/llm_args.py` (two 2026 versions of main), the versioned API
reference (1.3.0rc26-1.4.0rc4) and the pull requests that changed it; release boundaries
marked "inferred" come from merge and release dates, not from tags:
- draft models: `decoding_type: Draft_Target` (it was `DraftTarget` before May 2025, PR #4558).
- EAGLE-3: `decoding_type: Eagle3` from 1.3.0rc0 (PR #10124, inferred); before, `Eagle`, whose
  PyTorch path runs EAGLE-3 heads.
- the drafter: `speculative_model` (1.3 on), `speculative_model_dir` before (still an alias).
- `draft_len_schedule` {batch size: draft length}: absent before 1.2.0 (inferred). In 1.2.x the
  keys are lower bounds, key 1 is required and its value must equal `max_draft_len` (PR #8194),
  for draft-model (two-model) speculation; the one-model EAGLE-3 path reads it from 1.3.0rc8.
  From 1.3.0rc8 (PR #10860, inferred) keys are inclusive upper bounds, a batch larger than the
  largest key drafts nothing, and the smallest key's value must equal `max_draft_len`.
- drafting nothing, from 1.3.0rc8 to 1.4.0rc1 (the newest read): the worker then skips the
  drafter, whose KV cache misses those positions, and acceptance silently collapses once the
  batch shrinks and drafting resumes (PR #16888). Main since floors the depth at
  `min_runtime_draft_len` (1 for Draft_Target; 0 for Eagle3, whose drafter it keeps warm), in
  no release read. So a range chosen to draft nothing is written as 1, the largest key is the
  schedule's largest batch size, and a note says to serve no larger batch.
- trees for EAGLE-3 on the PyTorch backend: a static tree `eagle_choices` (a list of rank paths,
  deduplicated and sorted; a node without its parent is refused; `max_draft_len` is reset to its
  depth) on the two-model path (`eagle3_one_model: false`) from 1.2.0rc0 (PRs #7161 and #8586,
  inferred), deprecated in 1.3 and gone from 1.4.0rc0 (PR #18210, inferred), where the one-model
  path drafts a dynamic tree instead (`use_dynamic_tree`, `dynamic_tree_max_topK` > 0,
  `max_total_draft_tokens` between `max_draft_len` and top-k x `max_draft_len`; PR #13081).
- DFlash drafters: `decoding_type: DFlash` (`DFlashDecodingConfig`, PR #12794, merged between
  1.3.0rc11 and rc14; rc13's contents could not be read, so rc14 is the earliest release claimed).
  `mask_token_id` and `target_layer_ids` left unset are read from the checkpoint's `dflash_config`.
  The worker (`_torch/speculative/dflash.py`) drafts a block of `max_draft_len` + 1 and stops at
  start-up when that exceeds the checkpoint's `block_size`, so a depth below block_size - 1 drafts
  a shorter block than the drafter was trained on (noted unless the curve was measured so,
  `block_drafting: depth`). Its `draft_len_schedule` support for DFlash (PR #12262) is in main after
  the releases read: one depth. No trees.
"""

from __future__ import annotations

import yaml
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

NAME = "trtllm"
OLDEST, NEWEST = "1.0.0", "1.4.0rc1"
DEFAULT_VERSION = "1.2.1"  # the current stable release; 1.3 and 1.4 are release candidates
EAGLE3_TYPE = "1.3.0rc0"
SCHEDULE_LOWER_BOUNDS = "1.2.0"
SCHEDULE_UPPER_BOUNDS = "1.3.0rc8"
STATIC_TREE, DYNAMIC_TREE = "1.2.0rc0", "1.4.0rc0"
DFLASH = "1.3.0rc14"


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
    """(`config_dir`: where files would go; this engine's config is all in its text.) `tree`: a
    static tree before 1.4, the dynamic-tree limits that bound it from 1.4. `block_size`: a DFlash
    drafter's trained block (None: not known here)."""
    if method == "dflash":
        return _emit_dflash(schedule, model, version, draft_sampling, tree, block_size, block_drafting)
    new = at_least(version, EAGLE3_TYPE)
    decoding_type = "Draft_Target" if method == "draft_model" else ("Eagle3" if new else "Eagle")
    notes = tree_notes = ()
    if tree:
        why = tree_blocker(NAME, tree, schedule, method) or (
            None if at_least(version, STATIC_TREE) else f"trees reach the PyTorch backend in {STATIC_TREE}"
        )
        if why is None:
            return _emit_tree(check_tree(tree), decoding_type, model, version, draft_sampling)
        tree_notes = not_written(NAME, version, tree, why)
    if not constant(schedule):
        if not at_least(version, SCHEDULE_LOWER_BOUNDS):
            schedule, notes = batch1(schedule, NAME, version, f"draft_len_schedule arrived in {SCHEDULE_LOWER_BOUNDS}")
        elif method == "eagle3" and not at_least(version, SCHEDULE_UPPER_BOUNDS):
            schedule, notes = batch1(
                schedule,
                NAME,
                version,
                f"draft_len_schedule reaches the one-model EAGLE-3 path from {SCHEDULE_UPPER_BOUNDS}",
            )
        elif schedule[0][2] != max(k for _, _, k in schedule):
            schedule, notes = batch1(
                schedule,
                NAME,
                version,
                "draft_len_schedule must draft its longest at the smallest batch sizes, and this one rises",
            )
        if at_least(version, SCHEDULE_UPPER_BOUNDS):
            schedule, floor_notes = _floored(schedule, version)
            notes += floor_notes
    top = max(k for _, _, k in schedule)
    spec = {
        "decoding_type": decoding_type,
        "max_draft_len": top,
        ("speculative_model" if new else "speculative_model_dir"): model,
    }
    if not constant(schedule):
        if at_least(version, SCHEDULE_UPPER_BOUNDS):
            spec["draft_len_schedule"] = {hi: k for _, hi, k in schedule}
            notes += (
                f"trtllm {version}: serve with max_batch_size {schedule[-1][1]} or less: a larger batch drafts "
                "nothing, which on this release leaves the drafter's KV cache stale",
            )
        else:
            spec["draft_len_schedule"] = {lo: k for lo, _, k in schedule}
    notes += unset_sampling(NAME, draft_sampling)
    return Emitted(text=yaml.safe_dump({"speculative_config": spec}, sort_keys=False), notes=tree_notes + notes)


def _floored(schedule: list[Range], version: Version) -> tuple[list[Range], tuple[str, ...]]:
    """The schedule with each range chosen to draft nothing drafting 1 instead, and the note why."""
    zero = [f"{lo}-{hi}" for lo, hi, k in schedule if k == 0]
    if not zero:
        return schedule, ()
    floored: list[Range] = []
    for lo, hi, k in schedule:
        if floored and floored[-1][2] == max(k, 1):
            floored[-1] = (floored[-1][0], hi, max(k, 1))
        else:
            floored.append((lo, hi, max(k, 1)))
    return floored, (
        f"trtllm {version}: batch sizes {', '.join(zero)} were chosen to draft nothing and are written as 1: "
        "a batch that drafts nothing leaves the drafter's KV cache stale here, and acceptance collapses once "
        "the batch shrinks (PR 16888)",
    )


def _emit_tree(tree, decoding_type: str, model: str, version: Version, draft_sampling: str | None) -> Emitted:
    sh = shape(tree)
    model_key = "speculative_model" if at_least(version, EAGLE3_TYPE) else "speculative_model_dir"
    spec: dict = {"decoding_type": decoding_type, "max_draft_len": sh.depth, model_key: model}
    if at_least(version, DYNAMIC_TREE):
        total = min(max(sh.nodes, sh.depth), sh.topk * sh.depth)
        spec.update(use_dynamic_tree=True, dynamic_tree_max_topK=sh.topk, max_total_draft_tokens=total)
        notes = (
            f"trtllm {version}: static trees are gone; the dynamic tree picks its {total} draft tokens itself "
            f"by the drafter's scores within depth {sh.depth} and top-{sh.topk}, so it may differ from the one "
            "measured",
        )
    else:
        spec.update(eagle_choices=[list(n) for n in tree], eagle3_one_model=False)
        notes = (f"trtllm {version}: static trees run on the two-model EAGLE-3 path (eagle3_one_model: false)",)
    notes += unset_sampling(NAME, draft_sampling)
    return Emitted(text=yaml.safe_dump({"speculative_config": spec}, sort_keys=False), notes=notes, tree_written=True)


DFLASH_RULES = {  # how the worker runs a DFlash drafter (common.one_block_depth)
    "since": DFLASH,
    "method": "decoding_type DFlash (inferred)",
    "no_schedule": "its draft_len_schedule does not reach DFlash in the releases read",
    "block": "max_draft_len + 1",
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
    spec = {"decoding_type": "DFlash", "max_draft_len": depth, "speculative_model": model}
    notes += unset_sampling(NAME, draft_sampling)
    return Emitted(text=yaml.safe_dump({"speculative_config": spec}, sort_keys=False), notes=notes)
