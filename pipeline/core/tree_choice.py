"""The tree choice: for every budget of draft tokens the best tree (pipeline/core/trees.py), then
the budget whose tree has the highest predicted speedup, per batch size, with the depth
choice's noise-aware rule (the smaller tree wins when within noise) and, as for depths, a tree
that never grows with the batch.

Tokens per pass are a decoder's (pipeline/core/acceptance.decode_walk) over each prompt's chain
starts, with the drafts each start keeps under the tree; cross-fitted: each prompt is scored
with the tree of that budget fitted on the other half of the prompts, so that a tree is not
credited with the chance successes it was fitted to. A round costs one drafter pass per tree
level, over the nodes whose children it drafts, and one target pass over the root and every
node under a tree mask, all as timed by cost profiling at that batch size
(workers/measure/cost.py):
speedup(B, tree) = tokens(tree) * t_decode(B)
                   / (sum_levels t_draft(B, width) + t_verify_tree(B, n + 1)).
At batch size 1, where the tree engine's whole iteration was timed drafting the chain of every
depth D as a tree (`tree_pass_ms`), a tree of depth D costs that iteration with the chain's
drafter passes and target pass swapped for its own, so the engine's bookkeeping is counted too.
The chain it competes with is the one the depth choice serves: its depth, and its tokens per
pass as the depth choice predicts them under the drafting rule it serves (`chain_tokens`; at
temperature above 0 with sampled drafts these are not the top-1 rank path's, which would verify
the chain as if drafting were greedy), costed as the top-1 tree on the same timings, so that the
tree's gain over it is the ratio of the two and the engines' bookkeeping cancels.

What follows the choice: `measure_speedup` runs the chosen tree, the best trees one and two
sizes either side, the chain at its chosen depth and plain decoding side by side
(workers/measure/tree_speedup.py) and judges them (pipeline/core/verdict.py); `autotune` writes
a tree only where it is predicted to beat the chain (pipeline/autotune/engines/registry.py).
Results: experiments/results/trees/README.md and experiments/results/fleet_small/README.md.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from pipeline.core.acceptance import decode_walk
from pipeline.core.tree_contracts import TreeCandidate, TreeChoice
from pipeline.core.trees import Tree, best_trees, chain_tree, kept, prefix_counts, shape
from pipeline.core.types import CostProfile

RankPaths = Sequence[Sequence[Sequence[int]]]  # per prompt, per chain start


def round_ms(tree: Tree, draft_ms: Sequence[float], verify_ms: Sequence[float]) -> float:
    """Milliseconds of one drafting-and-verifying round with `tree` at one batch size.
    draft_ms[w - 1]: a drafter pass over w nodes; verify_ms[m - 1]: a target pass over m tokens."""
    if len(tree) + 1 > len(verify_ms):
        raise ValueError(
            f"a tree of {len(tree)} nodes needs target passes over {len(tree) + 1} tokens timed; "
            f"cost profiling timed up to {len(verify_ms)}"
        )
    parents = [sum(1 for n in tree if len(n) == d and any(c[:-1] == n for c in tree)) for d in range(shape(tree).depth)]
    widths = [1 if d == 0 else w for d, w in enumerate(parents)]  # the root drafts level 1
    return sum(draft_ms[w - 1] for w in widths) + verify_ms[len(tree)]


def walks(rank_paths: RankPaths, tree: Tree) -> list[tuple[int, int]]:
    """Per prompt, (tokens, target passes) of a decoder drafting `tree` every round."""
    nodes = set(tree)
    depth = shape(tree).depth
    return [decode_walk([kept(p, nodes) for p in prompt], depth) for prompt in rank_paths]


def _pooled(rows: Sequence[tuple[int, int]]) -> float:
    return sum(t for t, _ in rows) / sum(p for _, p in rows)


def _pick(
    speedups: list[float],
    per_prompt: list[list[tuple[int, int]]],
    cost: list[float],
    n_boot: int,
    level: float,
    seed: int,
) -> tuple[int, int]:
    """(chosen budget, best point budget): the smallest budget whose paired difference to the best
    is within noise (its bootstrap interval over prompts reaches 0)."""
    best = max(range(len(speedups)), key=lambda n: (speedups[n], -n))
    rng = random.Random(seed)
    prompts = len(per_prompt[0])
    draws = [[rng.randrange(prompts) for _ in range(prompts)] for _ in range(n_boot)]
    tail = int((1.0 - level) / 2 * (n_boot - 1))
    for n in range(best):
        diffs = sorted(
            _pooled([per_prompt[best][i] for i in d]) / cost[best] - _pooled([per_prompt[n][i] for i in d]) / cost[n]
            for d in draws
        )
        if diffs[tail] <= 0.0:
            return n, best
    return best, best


def _fit(rank_paths: RankPaths, budget: int, max_depth: int, topk: int) -> list[Tree]:
    return best_trees(
        prefix_counts(p for prompt in rank_paths for p in prompt), budget, max_depth=max_depth, max_topk=topk
    )


def _crossfit_walks(rank_paths: RankPaths, trees: list[Tree], budget: int, max_depth: int, topk: int):
    """Per budget, per prompt: the decoder's walk under the best tree fitted on the other half of the
    prompts. A tree scored on the text it was fitted to looks better than it is (its deep, rare
    nodes won by chance); scored on the other half, its tokens per pass are what the procedure
    delivers on new text. With a single prompt there is no other half: the trees themselves."""
    if len(rank_paths) < 2:
        return [walks(rank_paths, t) for t in trees]
    halves = [list(range(0, len(rank_paths), 2)), list(range(1, len(rank_paths), 2))]
    fitted = [_fit([rank_paths[i] for i in half], budget, max_depth, topk) for half in halves]
    out = [[(0, 0)] * len(rank_paths) for _ in trees]
    for h, half in enumerate(halves):
        for n, tree in enumerate(fitted[1 - h]):
            for i, walk in zip(half, walks([rank_paths[i] for i in half], tree)):
                out[n][i] = walk
    return out


def choose_tree(
    rank_paths: RankPaths,
    cost: CostProfile,
    *,
    max_depth: int,
    topk: int,
    chain_depth: int,
    chain_tokens: float,
    seed: int = 0,
    n_boot: int = 1000,
    level: float = 0.9,
) -> TreeChoice:
    """The tree per profiled batch size, from the rank paths of the primary curve and the tree timings,
    against the served chain of `chain_depth` drafts yielding `chain_tokens` tokens per target pass."""
    if not cost.tree_verify_ms_by_batch:
        raise ValueError("the cost profile timed no tree passes (cost.tree_budget is 0)")
    budget = len(cost.tree_draft_ms_by_batch[0])
    if cost.tree_pass_ms and len(cost.tree_pass_ms) <= max_depth:
        raise ValueError(
            f"the tree engine was timed at depths 0..{len(cost.tree_pass_ms) - 1}, the curve reaches {max_depth}"
        )
    trees = _fit(rank_paths, budget, max_depth, topk)
    per_prompt = _crossfit_walks(rank_paths, trees, budget, max_depth, topk)
    tokens = [_pooled(w) for w in per_prompt]
    chain = chain_tree(chain_depth)
    by_batch, chosen, candidates_speedups, chain_speedups = {}, None, [], []
    cap = None
    for i, b in enumerate(cost.batch_sizes):
        draft, verify = cost.tree_draft_ms_by_batch[i], cost.tree_verify_ms_by_batch[i]
        timed = cost.tree_pass_ms if b == 1 else ()

        def ms_of(t: Tree) -> float:
            own = round_ms(t, draft, verify)  # noqa: B023 (called in this iteration only)
            depth = shape(t).depth
            return own if not timed else timed[depth] + own - round_ms(chain_tree(depth), draft, verify)  # noqa: B023

        ms = [ms_of(t) for t in trees]
        base = timed[0] if timed else verify[0]
        speedups = [a * base / m for a, m in zip(tokens, ms)]
        n, best = _pick(speedups, per_prompt, ms, n_boot, level, seed)
        if cap is not None:  # a tree never grows with the batch: verifying more tokens only gets dearer
            n = min(n, cap)
        by_batch[b], cap = n, n
        if chosen is None:
            chosen = (n, best)
        candidates_speedups.append(speedups)
        chain_speedups.append(chain_tokens * base / ms_of(chain))
    n, best = chosen
    return TreeChoice(
        tree=trees[n],
        decode_accept_len=tokens[n],
        speedup=candidates_speedups[0][n],
        best_point=best,
        chain_depth=len(chain),
        chain_decode_accept_len=chain_tokens,
        chain_speedup=chain_speedups[0],
        candidates=tuple(
            TreeCandidate(tree=t, decode_accept_len=tokens[k], speedups=tuple(s[k] for s in candidates_speedups))
            for k, t in enumerate(trees)
        ),
        batch_budgets=by_batch,
        chain_speedups=tuple(chain_speedups),
    )
