"""vLLM: `--speculative-config '<json>'`, read into `SpeculativeConfig`.

As read in `vllm/config/speculative.py` and `vllm/v1/spec_decode/dynamic/utils.py` of the
released wheels 0.10.2 to 0.33.0:
- `method`, `model`, `num_speculative_tokens` in every release. `eagle3` throughout;
  `draft_model` raises NotImplementedError before 0.15.0, must be named in 0.15-0.16, is the
  default from 0.17. In every release a draft model whose path contains "eagle3" or "eagle-"
  is switched to EAGLE, whatever `method` says. `dflash` from 0.20.0 (not in 0.19.1): named, it
  is never switched; its drafter always drafts one block, [last token, mask x N], in one pass.
- From 0.16.0 the config forbids unknown keys (refused at start-up); before, they are dropped.
- `draft_sample_method` (how drafts are drawn at temperature > 0) from 0.21.0: `greedy` or
  `gumbel` in 0.21, `greedy` (the default: argmax, verified with q one-hot) or `probabilistic`
  (sampled from q, verified with q) from 0.22.
- `num_speculative_tokens_per_batch_size` from 0.24.0 (PR #32374): a list of inclusive
  [lo, hi, K] ranges, the first starting at 1, none overlapping; a gap or a batch size past
  the last range keeps the previous range's K; K is capped at `num_speculative_tokens`.
- Which model runner serves the ranges (`VllmConfig.use_v2_model_runner`, vllm/config/vllm.py):
  in 0.24 the V2 runner refuses them, so V1 does. From 0.25.0 V2 is the default for a dense
  target (for every target from 0.30.0) and serves EAGLE ranges; it serves draft models from
  0.31.0. V2's speculators draft `num_speculative_tokens` every step whatever the step's K
  (v1/worker/gpu/spec_decode/autoregressive/speculator.py; the scheduler verifies K of them and
  the rest is wasted) until 0.32.0, where the EAGLE one reads K (`num_spec_tokens_to_schedule`);
  the draft-model one never does (seen on 0.32.0 by specfleet's serving check: 1.00 tokens per
  draft in a K = 0 range). EAGLE-3 on 0.25.0-0.31.x and draft models from 0.31.0 therefore get
  the batch-size-1 depth and a note.
- The V1 runner overrides full CUDA graphs to PIECEWISE when ranges are set
  (`_maybe_override_dynamic_sd_cudagraph_mode`): noted where ranges reach it (0.24.x, and draft
  models to 0.30.x).
- A K = 0 range still runs one drafter forward a step in every release (V1: the proposer's first
  forward runs before it reads K, llm_base_proposer.py; V2 from 0.32: the speculator's prefill),
  so those batch sizes cost more than plain decoding (vLLM issue 49548, open): noted.
- `speculative_token_tree` from 0.10.1 to 0.20.x (removed in 0.21.0): a string holding a Python
  list of rank tuples, sorted breadth-first; `num_speculative_tokens` is its number of nodes. It
  is drafted only under the TREE_ATTN attention backend (`--attention-backend TREE_ATTN` from
  0.14.0, the VLLM_ATTENTION_BACKEND variable before), and the drafter gives every node of a
  level as many children as (nodes on the level) // (nodes on the level above): the tree must
  branch evenly. Its drafts are verified by the chain's rejection sampler, which at temperature
  above 0 does not keep the target distribution over siblings.
- The DFlash block (N above): the V1 proposer (vllm/v1/spec_decode/dflash.py, 0.20.0 on) builds
  it from the step's K, so N = K; the V2 speculator (v1/worker/gpu/spec_decode/dflash/, the
  runner for it from 0.25.0 as for EAGLE) from `num_speculative_tokens` whatever the step's K,
  and from 0.32.0 the runner then drops the drafts past K (model_runner.py). So from 0.32.0
  `num_speculative_tokens` = the drafter's trained block size - 1 with a range per batch size
  (one for a constant depth) drafts whole blocks, as the drafter was trained and measured, and
  verifies the chosen K; before, the block is the K verified, shorter than the trained one (noted).
  A drafter measured on blocks of K + 1 (`block_drafting: depth`) gets num_speculative_tokens = the
  deepest K instead: its block at one depth is the measured one (ranges of a smaller K noted).
"""

from __future__ import annotations

import json
import shlex

from packaging.version import Version

from pipeline.autotune.engines.common import (
    Emitted,
    EngineVersionError,
    at_least,
    batch1,
    constant,
    not_written,
    tree_blocker,
    unset_sampling,
)
from pipeline.core.schedule import Range
from pipeline.core.trees import check_tree

NAME = "vllm"
OLDEST, NEWEST = "0.10.2", "0.33.0"
DEFAULT_VERSION = NEWEST
PER_BATCH_SIZE = "0.24.0"
V2_RUNNER = "0.25.0"  # the default runner (dense targets) serves per-batch-size ranges
EAGLE_READS_DEPTH = "0.32.0"  # before it, the V2 runner's EAGLE speculator drafts num_speculative_tokens
DRAFT_MODEL_FIXED_DEPTH = "0.31.0"  # a draft model drafts num_speculative_tokens at every batch size
DRAFT_MODEL = "0.15.0"
DFLASH = "0.20.0"
DRAFT_SAMPLE_METHOD = "0.22.0"  # greedy | probabilistic (0.21.0: greedy | gumbel)
RENAMED_AS_EAGLE = ("eagle3", "eagle-")  # path fragments vLLM takes as "this is an EAGLE head"
TREE, TREE_REMOVED, BACKEND_FLAG = "0.10.1", "0.21.0", "0.14.0"


def branches_evenly(tree) -> bool:
    """Whether every node of each level has the same number of children, the top ones by rank."""
    levels: list[list] = [[()]]
    for node in tree:
        if len(node) > len(levels) - 1:
            levels.append([])
        levels[len(node)].append(node)
    for above, level in zip(levels, levels[1:]):
        width, rest = divmod(len(level), len(above))
        if rest or sorted(level) != sorted(p + (r,) for p in above for r in range(width)):
            return False
    return True


def _tree_problem(tree, schedule, method: str, version: Version, draft_sampling: str | None) -> str | None:
    why = tree_blocker(NAME, tree, schedule, method)
    if why:
        return why
    if not at_least(version, TREE) or at_least(version, TREE_REMOVED):
        return f"speculative_token_tree runs from {TREE} and was removed in {TREE_REMOVED}"
    if draft_sampling is not None:
        return (
            "at temperature > 0 vLLM verifies a tree with its chain rejection sampler, which does not keep the "
            "target distribution over siblings"
        )
    if not branches_evenly(tree):
        return "vLLM gives every node of a level the same number of children, and this tree branches unevenly"
    return None


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
    """(`config_dir`: where files would go; this engine's config is all in its text.) `tree`: the
    draft tree to run instead of the chain, where this release can run it as chosen. `block_size`:
    a DFlash drafter's trained block (None: not known here)."""
    if method == "dflash" and not at_least(version, DFLASH):
        raise EngineVersionError(
            f"vllm {version} cannot serve a DFlash drafter (method dflash arrived in {DFLASH}); use a newer vLLM"
        )
    if method == "draft_model":
        if not at_least(version, DRAFT_MODEL):
            raise EngineVersionError(
                f"vllm {version} cannot serve a draft model (draft-model speculation arrived "
                f"in {DRAFT_MODEL}); use a newer vLLM or an EAGLE-3 drafter"
            )
        hit = next((frag for frag in RENAMED_AS_EAGLE if frag in model.lower()), None)
        if hit is not None:
            raise EngineVersionError(
                f"vllm would serve {model} as an EAGLE head, not a draft model (its path contains "
                f"{hit!r}); rename or link the folder",
                option="--drafter-path",
            )
    notes = tree_notes = ()
    if tree:
        why = _tree_problem(check_tree(tree), schedule, method, version, draft_sampling)
        if why is None:
            return _emit_tree(check_tree(tree), model=model, method=method, version=version)
        tree_notes = not_written(NAME, version, tree, why)
    if not constant(schedule) and not at_least(version, PER_BATCH_SIZE):
        schedule, notes = batch1(
            schedule, NAME, version, f"num_speculative_tokens_per_batch_size arrived in {PER_BATCH_SIZE}"
        )
    elif not constant(schedule) and (why := _fixed_depth(method, version)):
        schedule, notes = batch1(schedule, NAME, version, why)
    top = max(k for _, _, k in schedule)
    config = {"method": method, "model": model, "num_speculative_tokens": top}
    # from 0.32 the speculator drafts 1 + num_speculative_tokens and the runner verifies the range's K:
    # whole trained blocks where the curve measured them so; otherwise the deepest K's block
    drafts_blocks = method == "dflash" and at_least(version, EAGLE_READS_DEPTH)
    whole_blocks = drafts_blocks and block_size is not None and block_drafting == "trained"
    if whole_blocks:
        config["num_speculative_tokens"] = block_size - 1
    if not constant(schedule) or whole_blocks:
        config["num_speculative_tokens_per_batch_size"] = [list(r) for r in schedule]
        notes += _range_costs(schedule, method, version)
    if method == "dflash" and block_drafting == "depth":
        if drafts_blocks and not constant(schedule):
            notes += (_deepest_block(version, top, schedule),)
    elif method == "dflash" and not whole_blocks and top + 1 != block_size:
        notes += (_short_block(version, block_size),)
    if draft_sampling is not None:
        if at_least(version, DRAFT_SAMPLE_METHOD):
            config["draft_sample_method"] = "probabilistic" if draft_sampling == "sampled" else "greedy"
        elif draft_sampling == "greedy" and at_least(version, "0.21.0"):
            config["draft_sample_method"] = "greedy"
        else:
            notes += unset_sampling(f"vllm {version}", draft_sampling)
    return Emitted(
        text="--speculative-config " + shlex.quote(json.dumps(config, separators=(",", ":"))), notes=tree_notes + notes
    )


def _short_block(version: Version, block_size: int | None) -> str:
    trained = (
        f"its trained block of {block_size}"
        if block_size
        else "its trained block (not known here: name a drafter folder on this machine)"
    )
    return (
        f"vllm {version}: the DFlash drafter drafts a block of K + 1 tokens for a depth of K here, not "
        f"{trained}, which the curve was measured with; its acceptance may differ"
        + ("" if at_least(version, EAGLE_READS_DEPTH) else f" (from {EAGLE_READS_DEPTH} it drafts whole blocks)")
    )


def _deepest_block(version: Version, top: int, schedule: list[Range]) -> str:
    smaller = ", ".join(f"{lo}-{hi}: k={k}" for lo, hi, k in schedule if k < top)
    return (
        f"vllm {version}: the DFlash drafter drafts a block of {top + 1} at every batch size and verifies each "
        f"range's K; the curve drafted blocks of K + 1 (block_drafting: depth), so the ranges with a smaller K "
        f"({smaller}) may accept otherwise than predicted"
    )


def _fixed_depth(method: str, version: Version) -> str | None:
    """Why the model runner that serves this method in this release drafts num_speculative_tokens
    at every batch size whatever its range says, or None."""
    if method == "draft_model" and at_least(version, DRAFT_MODEL_FIXED_DEPTH):
        return (
            f"from {DRAFT_MODEL_FIXED_DEPTH} a draft model drafts num_speculative_tokens at every batch size "
            "(its per-batch-size ranges are accepted and ignored)"
        )
    if method in ("eagle3", "dflash") and at_least(version, V2_RUNNER) and not at_least(version, EAGLE_READS_DEPTH):
        return (
            f"the V2 model runner (the default from {V2_RUNNER} for dense targets, from 0.30.0 for all) drafts "
            f"num_speculative_tokens at every batch size until {EAGLE_READS_DEPTH} (VLLM_USE_V2_MODEL_RUNNER=0 runs "
            "the ranges, on PIECEWISE CUDA graphs)"
        )
    return None


def _range_costs(schedule: list[Range], method: str, version: Version) -> tuple[str, ...]:
    """What per-batch-size ranges cost beyond the depths chosen: the V1 runner's PIECEWISE CUDA
    graphs, and the drafter forward a K = 0 range still runs."""
    notes: tuple[str, ...] = ()
    if not at_least(version, DRAFT_MODEL_FIXED_DEPTH if method == "draft_model" else V2_RUNNER):
        notes += (
            f"vllm {version}: the V1 model runner serves per-batch-size ranges with PIECEWISE CUDA graphs "
            "instead of full ones, so decode steps may run slower than the times the depths were chosen with",
        )
    zero = [f"{lo}-{hi}" for lo, hi, k in schedule if k == 0]
    if zero:
        notes += (
            f"vllm: batch sizes {', '.join(zero)} (k=0) still run one drafter forward a step to keep its KV cache "
            "in step (vLLM issue 49548), so they cost more than plain decoding",
        )
    return notes


def _emit_tree(tree, *, model: str, method: str, version: Version) -> Emitted:
    config = {
        "method": method,
        "model": model,
        "num_speculative_tokens": len(tree),
        "speculative_token_tree": "[" + ", ".join(str(tuple(n)) for n in tree) + "]",
    }
    text = "--speculative-config " + shlex.quote(json.dumps(config, separators=(",", ":")))
    if at_least(version, BACKEND_FLAG):
        return Emitted(text=text + " --attention-backend TREE_ATTN", tree_written=True)
    return Emitted(
        text=text,
        tree_written=True,
        notes=(
            f"vllm {version}: set VLLM_ATTENTION_BACKEND=TREE_ATTN in the server's "
            "environment: without it the tree is drafted as a chain",
        ),
    )
