"""Small frozen result types that cross package boundaries (workers -> driver -> db/MLflow).

They hold plain Python numbers only, so the driver, the database and MLflow never need torch;
the job results of pipeline/core/contracts.py carry them and read them back from JSON.
Metric names are the same everywhere (code, database columns, MLflow keys):
- `depth` k: drafted tokens per verification pass (chain length);
- `cond_accept[j]`: P(draft j accepted | drafts 1..j-1 accepted);
- `survival[j]`: P(at least j drafts accepted) = prod_{i<=j} cond_accept[i];
- `accept_len(k)`: tokens per target pass at depth k, the bonus token included:
  1 + sum_{j<=k} survival[j] (EAGLE's, vLLM's and SGLang's convention);
- `decode_accept_len(k)`: the same, counted over the chain starts a decoder visits;
- `cost_ratio` c: one drafter step over one target decode step, on one device.
"""

from __future__ import annotations

from dataclasses import dataclass

# The per-depth attention-drift diagnostics, measured beside EAGLE curves (workers/measure/diagnostics.py).
DRIFT_NAMES = ("rms", "sink_attn", "recent_attn", "draft_attn", "attn_entropy")


@dataclass(frozen=True)
class Curve:
    """Acceptance versus depth for one pairing under one evaluation condition.

    Lists are indexed by depth: ``cond_accept[j-1]`` and ``survival[j-1]`` for j = 1..max_depth,
    ``accept_len[k]`` for k = 0..max_depth (``accept_len[0] == 1``: no draft, bonus token only).
    """

    condition: str
    temperature: float
    num_chains: int
    cond_accept: tuple[float, ...]
    survival: tuple[float, ...]
    accept_len: tuple[float, ...]
    # tokens per target pass when decoding at depth k = 0..max_depth, over the chain starts a
    # decoder actually visits (see acceptance.decode_walk); empty when not measured
    decode_accept_len: tuple[float, ...] = ()
    category: str = ""  # the prompts' category ("": every prompt of the evaluation)

    @property
    def max_depth(self) -> int:
        return len(self.survival)


def relative_pass_cost(pass_ms) -> list[float]:
    """The engine iteration at every k in plain decode steps (pass_cost[0] = 1); [] if not timed."""
    return [p / pass_ms[0] for p in pass_ms]


@dataclass(frozen=True)
class CostProfile:
    """Timings of one drafter step and one target pass, measured on one worker's device."""

    hardware: str  # e.g. "cpu x1 float32" or "NVIDIA H100 80GB HBM3 x1 bfloat16"
    draft_ms: float  # one drafter step (one new token against a cached context), batch size 1
    decode_ms: float  # one target decode step (one new token against a cached context), batch size 1
    verify_ms: float  # one target pass over max_depth + 1 new tokens, batch size 1
    batch_sizes: tuple[int, ...] = (1,)
    draft_ms_by_batch: tuple[float, ...] = ()  # per batch size
    verify_ms_by_batch: tuple[tuple[float, ...], ...] = ()  # per batch size, per k = 0..max_depth (k+1 tokens)
    # one whole iteration of the speculative engine at batch size 1, per k = 0..max_depth: k drafter
    # forwards, the verify pass and the engine's own bookkeeping (k = 0: one plain decode step)
    pass_ms: tuple[float, ...] = ()
    # pass_ms as timed in blocks, one at the start of the profile and one at its end, each on half the
    # prompts (pass_ms is their mean): how far the timing moves (pipeline/core/timing_noise.py)
    pass_ms_blocks: tuple[tuple[float, ...], ...] = ()
    # draft trees, per batch size: a target pass over m = 1..max(tree_budget, max_depth) + 1 new tokens
    # under a tree attention mask (index m - 1), and one drafter pass over w = 1..tree_budget tree
    # nodes (index w - 1): the tree budget is the length of the second
    tree_verify_ms_by_batch: tuple[tuple[float, ...], ...] = ()
    tree_draft_ms_by_batch: tuple[tuple[float, ...], ...] = ()
    # one iteration of the tree engine at batch size 1 drafting the chain of depth D as a tree, per
    # D = 0..max_depth: what a tree of that depth costs besides its width
    tree_pass_ms: tuple[float, ...] = ()
    # whose clock timed it: "specfleet" (its own engine, the profile_cost job) or a serving engine
    # and its release, "vllm 0.32.0" (the engine_cost job: whole engine iterations, nothing apart)
    timed_by: str = "specfleet"
    # a round's drafts cost ONE drafter pass (draft_ms) whatever their number (a DFlash block drafter),
    # not one pass each (pipeline/core/choice.py::draft_passes)
    one_pass: bool = False

    @property
    def cost_ratio(self) -> float:
        return self.draft_ms / self.decode_ms

    @property
    def pass_cost(self) -> list[float]:
        return relative_pass_cost(self.pass_ms)


@dataclass(frozen=True)
class DepthChoice:
    """The depth that maximises the predicted speedup for one pairing."""

    depth: int
    accept_len: float
    speedup: float
    cost_ratio: float
    speedups: tuple[float, ...]  # predicted speedup at every k = 0..max_depth
    best_point: int | None = None  # the k with the highest point estimate (depth may be smaller: noise)
    accept_len_ci: tuple[float, float] | None = None  # bootstrap interval of accept_len at `depth`
    decode_accept_len: float | None = None  # a decoder's tokens per target pass at `depth`, when measured
    cost_model: str = "leviathan"  # how a pass was costed: "leviathan" (k c + 1) or "timed" (pass_ms)

    @property
    def tokens_per_pass(self) -> float:
        """The tokens per target pass `speedup` was predicted from: a decoder's when measured."""
        return self.decode_accept_len if self.decode_accept_len is not None else self.accept_len
