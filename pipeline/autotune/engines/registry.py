"""Engine configs from a per-batch-size depth schedule, one module per serving engine.

Each engine module knows, per release range, the field names, how the engine reads a depth
schedule and what it refuses, as read from the engine's own source (the module docstrings
name the files and releases). `emit(engine, schedule, model=..., method=..., version=...)`
returns what to print, any file the engine reads beside it, and notes on what that release
cannot express (it then gets the batch-size-1 depth at every batch size).

A schedule becomes vLLM's `--speculative-config`, SGLang's flags and its adaptive
per-batch-size JSON, TensorRT-LLM's `speculative_config` with `draft_len_schedule`, or HF
assisted-generation settings. Each emitted config is checked against that engine's rules.
workers/drafters/eagle3/export.py writes a pre-norm drafter in the EAGLE-3 layout that vLLM
and SGLang load; `specfleet autotune` (pipeline/autotune/tuning.py) uses both.

Releases (`autotune --engine-version`; the default is the newest read: vLLM 0.33.0, SGLang
0.5.23, TensorRT-LLM 1.2.1, transformers 5.24.0), and where each reads a depth per batch size:
- vLLM 0.10.2 - 0.33.0: `num_speculative_tokens_per_batch_size` from 0.24.0 (inclusive
  [lo, hi, k] ranges; a batch past the last range keeps its k; the V2 model runner drafts
  num_speculative_tokens at every batch size for EAGLE-3 on 0.25.0-0.31.x and for a draft model
  from 0.31.0, so those get the batch-size-1 depth and a note; ranges on the V1 runner (0.24.x,
  draft models to 0.30.x) run PIECEWISE CUDA graphs, and a k=0 range still runs a drafter
  forward, both noted); at temperature above 0,
  `draft_sample_method` (`probabilistic` for drafts sampled from q, `greedy` for argmax drafts)
  from 0.22.0 (`greedy` only in 0.21.0). Before 0.24.0: the batch-size-1 depth and a note
  (0.16-0.23 refuse unknown keys at start-up). `draft_model` before 0.15.0 is refused, and so is
  a draft model whose path contains `eagle3` or `eagle-` (vLLM would load it as an EAGLE head).
- SGLang 0.5.5 - 0.5.23: `--speculative-adaptive --speculative-adaptive-config FILE` from 0.5.13,
  its keys batch-size lower bounds, one candidate per range pinning the depth. Before 0.5.13 the
  batch-size-1 depth and a note (0.5.11-0.5.12 read one flat candidate list that moves with
  acceptance); ranges with no drafting need 0.5.14 (they still run draft-extend, noted); in
  0.5.13 every range must end on a CUDA-graph capture size (the router pads first); the steps
  flag is the schedule's largest depth (0.5.15-0.5.18 stop at start-up when a candidate exceeds
  it); STANDALONE draft models get the static depth (the server ignores adaptive mode for them).
- TensorRT-LLM 1.0.0 - 1.4.0rc1: `draft_len_schedule` with lower-bound keys and key 1 from 1.2.0
  (draft models only), with inclusive upper-bound keys from 1.3.0rc8, when EAGLE-3 reads it
  too; there a batch that drafts nothing leaves the drafter's KV cache stale (to 1.4.0rc1), so
  ranges chosen at 0 are written as 1, the largest key is the largest batch size, and notes
  say so. Before 1.2.0, and for EAGLE-3 before
  1.3.0rc8, the batch-size-1 depth and a note; a schedule whose longest draft is not at the
  smallest batch sizes cannot be written. `Eagle3` from 1.3.0rc0 (`Eagle` before),
  `Draft_Target` for draft models.
- transformers 4.48 - 5.24: none (assisted generation decodes one sequence): the batch-size-1
  depth; EAGLE heads are refused.
DFlash block drafters (`method dflash`): vLLM from 0.20.0 and SGLang from 0.5.11 (`DFLASH`; both
read from the released packages: 0.19.1 and 0.5.10.post1 have none), TensorRT-LLM from 1.3.0rc14
(`DFlash`; its pull request merged between rc11 and rc14, and rc13 could not be read, so rc14 is
the earliest release claimed), never transformers. The drafter fills one block
[last token, mask x N] a step: vLLM from 0.32.0 drafts the trained block
(num_speculative_tokens = block_size - 1) and verifies the depth chosen per batch size; every
other release and engine drafts a block of K + 1 for a depth K at one depth for every batch size
where it cannot read a schedule for DFlash (vLLM before 0.24 and 0.25-0.31, SGLang,
TensorRT-LLM). A drafter spec's `block_drafting` says which of the two the curve, costs and
validation drafted (`trained` by default, `depth` for blocks of K + 1); where the engine drafts the
other way a note says its acceptance may differ. A depth past the block is refused.
A release newer than the newest one read is written as for that one, with a note. For a curve
measured at temperature above 0, a release or engine that cannot be told to draw drafts the
way the curve did (vLLM before 0.22, SGLang, TensorRT-LLM; transformers for greedy drafts)
gets a note saying its acceptance may differ. The TensorRT-LLM boundaries 1.2.0, 1.3.0rc0 and
1.3.0rc8 are inferred from the dates of the pull requests that changed them; the others were
read in the released packages.

Draft trees: `autotune` writes the chosen tree when it is predicted to beat the chain and the
release runs it as chosen, else the chain with a note saying why.
- vLLM: `speculative_token_tree` with `num_speculative_tokens` = its nodes, 0.10.2 - 0.20.x,
  under the TREE_ATTN backend (`--attention-backend TREE_ATTN` from 0.14, the
  `VLLM_ATTENTION_BACKEND` variable before). The chain instead: from 0.21.0 (removed), for a
  tree whose levels branch unevenly (vLLM gives every node of a level the same number of
  children), at temperature above 0 (its tree drafts go through the chain's rejection
  sampler), and for draft models.
- SGLang: `--speculative-num-steps` = depth, `--speculative-eagle-topk` = the widest branching,
  `--speculative-num-draft-tokens` = nodes + 1; the server picks the nodes itself by the
  drafter's cumulative scores within those bounds (noted). The chain instead: more nodes than
  top-k + (steps - 1) x top-k^2, and draft models.
- TensorRT-LLM: `eagle_choices` on the two-model path (`eagle3_one_model: false`) from 1.2.0rc0;
  from 1.4.0rc0 the dynamic tree (`use_dynamic_tree`, `dynamic_tree_max_topK`,
  `max_total_draft_tokens`). The chain instead: before 1.2, and draft models.
- transformers: never a tree.
A depth that changes with the batch size keeps the chain's schedule in every engine: the
engines run one tree at every batch size. The TensorRT-LLM tree boundaries are inferred from
pull-request dates.

tests/support/engine_semantics.py re-implements each engine's reading of the config
independently; the tests check, for vLLM, SGLang, TensorRT-LLM and transformers at 34 releases,
two methods and four schedules, that the depth the engine will run at every batch size from 1
to the maximum is the depth specfleet chose (or the batch-size-1 depth with a note where the
release cannot express the schedule, or 1 where TensorRT-LLM cannot draft 0), and read the
trees back the same way; tests/pipeline/autotune/test_engine_hazards.py checks the hazards.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from packaging.version import Version

from pipeline.autotune.engines import sglang, transformers, trtllm, vllm
from pipeline.autotune.engines.common import Emitted, EngineVersionError, parse_version
from pipeline.core.model_settings import NOT_SERVED, SERVED_AS

MODULES = {m.NAME: m for m in (vllm, sglang, trtllm, transformers)}
ENGINES = tuple(MODULES)
WRITTEN = ("eagle3", "draft_model", "dflash")  # the methods the engine modules write settings for
UNWRITTEN = {SERVED_AS["mtp"]: NOT_SERVED["mtp"]}  # why the others get none


def folder_block_size(model: str) -> int | None:
    """A DFlash drafter's trained block size from its folder's config.json (`dflash_config.block_size`,
    else `block_size`, as the engines read it), or None where the folder is not on this machine or
    says none."""
    config = Path(model).expanduser() / "config.json"
    try:
        fields = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(fields, dict):
        return None
    nested = fields.get("dflash_config")
    value = (nested if isinstance(nested, dict) else {}).get("block_size", fields.get("block_size"))
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 1 else None


def check_version(engine: str, version: str | None) -> Version:
    """The release to write for, refused (EngineVersionError) before anything is stored."""
    module = MODULES[engine]
    return parse_version(engine, version or module.DEFAULT_VERSION, module.OLDEST)


def emit(
    engine: str,
    schedule,
    *,
    model: str,
    method: str,
    version: str | None = None,
    config_dir: str = ".",
    draft_sampling: str | None = None,
    tree=None,
    block_size: int | None = None,
    block_drafting: str = "trained",
) -> Emitted:
    """The engine's config for `schedule` at `version` (default: the engine's current release);
    files it names are to be written to `config_dir`. `draft_sampling`: at temperature > 0, how
    the curve drew and verified drafts ("sampled" or "greedy"); None at temperature 0. `tree`: a
    draft tree (pipeline/core/trees.py) to run instead of the chain; a release that cannot run it as
    chosen gets the chain, with a note saying why. `block_size`: a DFlash drafter's trained block, from
    its folder (None where it is not on this machine: the engines that size the block by the depth
    then say so). `block_drafting`: how the DFlash curve drafted a depth below that block ("trained":
    the whole block; "depth": a block of depth + 1); an engine that drafts otherwise says so."""
    module = MODULES[engine]
    v = check_version(engine, version)
    if method not in WRITTEN:
        why = UNWRITTEN.get(method, f"specfleet writes settings for {', '.join(WRITTEN)} drafters, not {method}")
        raise EngineVersionError(f"{engine}: {why}", option="--method")
    deepest = max(k for _, _, k in schedule)
    if method == "dflash" and block_size is None:
        block_size = folder_block_size(model)
    if method == "dflash" and block_size is not None and deepest > block_size - 1:
        raise EngineVersionError(
            f"{engine}: the DFlash drafter at {model} was trained on blocks of {block_size} and drafts at most "
            f"{block_size - 1} tokens, not {deepest}",
            option="--drafter-path",
        )
    out = module.emit(
        list(schedule),
        model=model,
        method=method,
        version=v,
        config_dir=config_dir,
        draft_sampling=draft_sampling,
        tree=tree,
        block_size=block_size,
        block_drafting=block_drafting,
    )
    if tree is not None and not out.tree_written and max(k for _, _, k in schedule) == 0:
        # the chain written instead of the tree drafts nothing: the engine's answer is no drafter at all
        out = Emitted(
            text="",
            notes=(
                *out.notes,
                f"{engine} {v}: the chain drafts nothing (k=0 at every batch size); serve without speculative settings",
            ),
        )
    if v > Version(module.NEWEST):
        note = f"{engine} {v} is newer than the newest release read ({module.NEWEST}): written as for that one"
        out = dataclasses.replace(out, notes=(*out.notes, note))
    return out


__all__ = ["ENGINES", "Emitted", "EngineVersionError", "check_version", "emit"]
