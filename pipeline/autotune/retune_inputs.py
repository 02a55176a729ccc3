"""What a production re-tune is decided from, as one sha256 digest: equal digests, equal decisions.

`specfleet autotune --from-metrics` stores a version only when this digest differs from that of
the workload's active version (db/production.py). The inputs are:
- the spec-decode counters the metrics gave for the model (over the window when two scrapes were
  given): drafts, draft tokens, accepted tokens and accepted tokens per position. The rest of a
  page (other metrics, timestamps, comments) decides nothing, so a server that verified no draft
  between two scrapes gives the same digest twice;
- the pairing (target, drafter), the hardware the version is stored under, its condition and the
  sampling temperature;
- the cost ratio when `--cost-ratio` gave it; otherwise the offline version whose costs the choice
  reused (its workload and version number: versions never change) and the batch-size costs its
  cost job was profiled with, as read (absent until that job is done);
- the code version, since other code may decide otherwise.
The engine, its release, the drafter's path and the method shape only the printed config, not the
stored version, so they are not inputs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

from pipeline.autotune.prod_metrics import SpecDecodeCounters
from pipeline.core.types import CostProfile

_VERSION_ID = ("target", "drafter", "hardware", "condition", "version")


def inputs_sha256(
    counters: SpecDecodeCounters,
    *,
    target: str,
    drafter: str,
    hardware: str,
    condition: str,
    temperature: float,
    given_cost_ratio: float | None,
    costed_by: dict | None,
    batch_cost: CostProfile | None,
    code_version: str,
) -> str:
    """The hex sha256 of a re-tune's inputs (see the module); `costed_by` is the offline version's
    row (store.best) when the choice reused its costs, `batch_cost` its cost job's profile."""
    inputs = {
        "counters": {
            "num_drafts": counters.num_drafts,
            "num_draft_tokens": counters.num_draft_tokens,
            "num_accepted_tokens": counters.num_accepted_tokens,
            "accepted_per_pos": list(counters.accepted_per_pos),
        },
        "target": target,
        "drafter": drafter,
        "hardware": hardware,
        "condition": condition,
        "temperature": temperature + 0.0,  # -0.0 and 0.0 are one temperature
        "cost_ratio": given_cost_ratio,
        "costed_by": [costed_by[k] for k in _VERSION_ID] if costed_by else None,
        "batch_cost": dataclasses.asdict(batch_cost) if batch_cost else None,
        "code_version": code_version,
    }
    text = json.dumps(inputs, sort_keys=True, allow_nan=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
