"""Hugging Face transformers assisted generation: `generate(assistant_model=...)` reads the
drafting settings from the assistant's generation config (`num_assistant_tokens`,
`num_assistant_tokens_schedule`, `assistant_confidence_threshold`, in
`transformers/generation/configuration_utils.py` and `candidate_generator.py`). It decodes one
sequence at a time, so the batch-size-1 depth is the one that applies. A constant schedule and
no confidence cut-off make it draft exactly that many tokens a round, as the depth was tuned
(its defaults, "heuristic" and 0.4, move the depth as drafts are accepted or not).
"""

from __future__ import annotations

import json

from packaging.version import Version

from pipeline.autotune.engines.common import Emitted, EngineVersionError, batch1, constant, not_written, unset_sampling
from pipeline.core.schedule import Range

NAME = "transformers"
OLDEST, NEWEST = "4.48.0", "5.24.0"  # the oldest this project installs with; the newest it was run with
DEFAULT_VERSION = NEWEST


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
    """(`config_dir`: where files would go; this engine's config is all in its text. `block_size` and
    `block_drafting`: a DFlash drafter's, which this engine does not serve.)"""
    if method != "draft_model":
        raise EngineVersionError(
            f"transformers: HF assisted generation drafts with a standalone draft model; "
            f"this drafter is {method} (use vllm, sglang or trtllm)",
            option="--engine",
        )
    notes: tuple[str, ...] = not_written(NAME, version, tree, "assisted generation drafts chains only") if tree else ()
    if not constant(schedule):
        schedule, extra = batch1(
            schedule, NAME, version, "assisted generation decodes one sequence at a time", option="--engine"
        )
        notes += extra
    config = {
        "assistant_model": model,
        "assistant_generation_config": {
            "num_assistant_tokens": schedule[0][2],
            "num_assistant_tokens_schedule": "constant",
            "assistant_confidence_threshold": 0.0,
        },
    }
    if draft_sampling == "greedy":  # HF samples the assistant's candidates and verifies them with q
        notes += unset_sampling(NAME, draft_sampling)
    return Emitted(text=json.dumps(config, indent=1), notes=notes)
