"""vLLM: `--speculative-config '<json>'`, read into `SpeculativeConfig`.

As read in `vllm/config/speculative.py` and `vllm/v1/spec_decode/dynamic/utils.py` of the
released wheels 0.10.2 to 0.33.0:
- `method`, `model`, `num_speculative_tokens` in every release. `eagle3` throughout;
  `draft_model` raises NotImplementedError before 0.15.0, must be named in 0.15-0.16, is the
  default from 0.17. In every release a draft model whose path contains "eagle3" or "eagle-"
  is switched to EAGLE, whatever `method` says.
- From 0.16.0 the config forbids unknown keys (refused at start-up); before, they are dropped.
- `draft_sample_method` (how drafts are drawn at temperature > 0) from 0.21.0: `greedy` or
  `gumbel` in 0.21, `greedy` (the default: argmax, verified with q one-hot) or `probabilistic`
  (sampled from q, verified with q) from 0.22.
- `num_speculative_tokens_per_batch_size` from 0.24.0 (PR #32374): a list of inclusive
  [lo, hi, K] ranges, the first starting at 1, none overlapping; a gap or a batch size past
  the last range keeps the previous range's K; K is capped at `num_speculative_tokens`.
"""
from __future__ import annotations

import json
import shlex

from packaging.version import Version

from pipeline.core.schedule import Range
from pipeline.engines.common import Emitted, EngineVersionError, at_least, batch1, constant, unset_sampling

NAME = "vllm"
OLDEST, NEWEST = "0.10.2", "0.33.0"
DEFAULT_VERSION = NEWEST
PER_BATCH_SIZE = "0.24.0"
DRAFT_MODEL = "0.15.0"
DRAFT_SAMPLE_METHOD = "0.22.0"  # greedy | probabilistic (0.21.0: greedy | gumbel)
RENAMED_AS_EAGLE = ("eagle3", "eagle-")  # path fragments vLLM takes as "this is an EAGLE head"


def emit(schedule: list[Range], *, model: str, method: str, version: Version, config_dir: str,
         draft_sampling: str | None = None) -> Emitted:
    """(`config_dir`: where files would go; this engine's config is all in its text.)"""
    if method == "draft_model":
        if not at_least(version, DRAFT_MODEL):
            raise EngineVersionError(f"vllm {version} cannot serve a draft model (draft-model speculation arrived "
                                     f"in {DRAFT_MODEL}); use a newer vLLM or an EAGLE-3 drafter")
        hit = next((frag for frag in RENAMED_AS_EAGLE if frag in model.lower()), None)
        if hit is not None:
            raise EngineVersionError(f"vllm would serve {model} as an EAGLE head, not a draft model (its path contains "
                                     f"{hit!r}); rename or link the folder", option="--drafter-path")
    notes: tuple[str, ...] = ()
    if not constant(schedule) and not at_least(version, PER_BATCH_SIZE):
        schedule, notes = batch1(schedule, NAME, version, f"num_speculative_tokens_per_batch_size arrived in "
                                                          f"{PER_BATCH_SIZE}")
    config = {"method": method, "model": model, "num_speculative_tokens": max(k for _, _, k in schedule)}
    if not constant(schedule):
        config["num_speculative_tokens_per_batch_size"] = [list(r) for r in schedule]
    if draft_sampling is not None:
        if at_least(version, DRAFT_SAMPLE_METHOD):
            config["draft_sample_method"] = "probabilistic" if draft_sampling == "sampled" else "greedy"
        elif draft_sampling == "greedy" and at_least(version, "0.21.0"):
            config["draft_sample_method"] = "greedy"
        else:
            notes += unset_sampling(f"vllm {version}", draft_sampling)
    return Emitted(text="--speculative-config " + shlex.quote(json.dumps(config, separators=(",", ":"))),
                   notes=notes)
