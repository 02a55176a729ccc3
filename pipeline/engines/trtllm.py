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
"""
from __future__ import annotations

import yaml
from packaging.version import Version

from pipeline.core.schedule import Range
from pipeline.engines.common import Emitted, at_least, batch1, constant, unset_sampling

NAME = "trtllm"
OLDEST, NEWEST = "1.0.0", "1.4.0rc1"
DEFAULT_VERSION = "1.2.1"  # the current stable release; 1.3 and 1.4 are release candidates
EAGLE3_TYPE = "1.3.0rc0"
SCHEDULE_LOWER_BOUNDS = "1.2.0"
SCHEDULE_UPPER_BOUNDS = "1.3.0rc8"


def emit(schedule: list[Range], *, model: str, method: str, version: Version, config_dir: str,
         draft_sampling: str | None = None) -> Emitted:
    """(`config_dir`: where files would go; this engine's config is all in its text.)"""
    new = at_least(version, EAGLE3_TYPE)
    decoding_type = "Draft_Target" if method == "draft_model" else ("Eagle3" if new else "Eagle")
    notes: tuple[str, ...] = ()
    if not constant(schedule):
        if not at_least(version, SCHEDULE_LOWER_BOUNDS):
            schedule, notes = batch1(schedule, NAME, version, f"draft_len_schedule arrived in {SCHEDULE_LOWER_BOUNDS}")
        elif method == "eagle3" and not at_least(version, SCHEDULE_UPPER_BOUNDS):
            schedule, notes = batch1(schedule, NAME, version, "draft_len_schedule reaches the one-model EAGLE-3 path "
                                                              f"from {SCHEDULE_UPPER_BOUNDS}")
        elif schedule[0][2] != max(k for _, _, k in schedule):
            schedule, notes = batch1(schedule, NAME, version, "draft_len_schedule must draft its longest at the "
                                                              "smallest batch sizes, and this one rises")
    top = max(k for _, _, k in schedule)
    spec = {"decoding_type": decoding_type, "max_draft_len": top,
            ("speculative_model" if new else "speculative_model_dir"): model}
    if not constant(schedule):
        if at_least(version, SCHEDULE_UPPER_BOUNDS):
            ranges = list(schedule)
            while ranges[-1][2] == 0:  # larger batches than the largest key draft nothing anyway
                ranges.pop()
            spec["draft_len_schedule"] = {hi: k for _, hi, k in ranges}
            if ranges[-1] == schedule[-1]:
                notes += (f"trtllm: batch sizes above {ranges[-1][1]} draft nothing (larger than the schedule's "
                          "largest key); raise cost.max_batch_size to choose for them",)
        else:
            spec["draft_len_schedule"] = {lo: k for lo, _, k in schedule}
    notes += unset_sampling(NAME, draft_sampling)
    return Emitted(text=yaml.safe_dump({"speculative_config": spec}, sort_keys=False), notes=notes)
