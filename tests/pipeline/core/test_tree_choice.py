"""The tree choice from rank paths and tree timings: costs decide the size, noise keeps it small."""

from __future__ import annotations

import random

import pytest

from pipeline.core.acceptance import decode_walk
from pipeline.core.tree_choice import choose_tree, round_ms, walks
from pipeline.core.trees import chain_tree, rank_path, shape
from pipeline.core.types import CostProfile


def _rank_paths(seed, prompts=12, starts=40, depth=5, topk=4, rate=1.0):
    rng = random.Random(seed)
    return [
        [rank_path([int(rng.expovariate(rate)) for _ in range(depth)], topk) for _ in range(starts)]
        for _ in range(prompts)
    ]


def _ranked_chain(paths, depth):
    """Tokens per pass of the top-1 chain walked over the rank paths: what the depth choice's decoder
    counts for its chain at temperature 0 (or with greedy drafts), so the chain it serves there."""
    rows = walks(paths, chain_tree(depth))
    return sum(t for t, _ in rows) / sum(p for _, p in rows)


def _choose(paths, cost, *, max_depth, topk, chain_depth):
    return choose_tree(
        paths,
        cost,
        max_depth=max_depth,
        topk=topk,
        chain_depth=chain_depth,
        chain_tokens=_ranked_chain(paths, chain_depth),
    )


def _cost(verify_slope, draft_ms=0.1, budget=8, batch_sizes=(1,), batch_slope=0.0):
    verify = tuple(
        tuple(1.0 + (verify_slope + batch_slope * i) * m for m in range(budget + 1)) for i, _ in enumerate(batch_sizes)
    )
    draft = tuple(tuple(draft_ms * (1 + 0.05 * w) for w in range(1, budget + 1)) for _ in batch_sizes)
    return CostProfile(
        hardware="cpu",
        draft_ms=draft_ms,
        decode_ms=1.0,
        verify_ms=1.0,
        batch_sizes=batch_sizes,
        draft_ms_by_batch=(draft_ms,) * len(batch_sizes),
        verify_ms_by_batch=((1.0,),) * len(batch_sizes),
        tree_verify_ms_by_batch=verify,
        tree_draft_ms_by_batch=draft,
    )


def test_cheap_verification_buys_a_wide_tree_and_dear_verification_a_small_one():
    paths = _rank_paths(0)
    cheap = _choose(paths, _cost(0.0), max_depth=5, topk=4, chain_depth=3)
    dear = _choose(paths, _cost(0.5), max_depth=5, topk=4, chain_depth=3)
    assert len(cheap.tree) > len(dear.tree)
    assert cheap.over_chain > 1.0  # free verification: a wider tree than the chain of 3 pays
    assert cheap.decode_accept_len > cheap.chain_decode_accept_len
    # the predicted speedup is the candidate's, at batch size 1
    assert cheap.speedup == cheap.candidates[len(cheap.tree)].speedups[0]


def test_the_chain_is_costed_and_counted_as_the_top1_tree():
    paths = _rank_paths(1)
    cost = _cost(0.2)
    choice = _choose(paths, cost, max_depth=5, topk=4, chain_depth=2)
    chain = chain_tree(2)
    rows = walks(paths, chain)
    assert choice.chain_decode_accept_len == pytest.approx(sum(t for t, _ in rows) / sum(p for _, p in rows))
    verify, draft = cost.tree_verify_ms_by_batch[0], cost.tree_draft_ms_by_batch[0]
    assert round_ms(chain, draft, verify) == pytest.approx(2 * draft[0] + verify[2])  # two drafter steps, 3 tokens
    assert choice.chain_speedup == pytest.approx(
        choice.chain_decode_accept_len * verify[0] / round_ms(chain, draft, verify)
    )
    # a decoder's walk over the leading top-1 ranks, as the chain curve's decode_accept_len walks accepted drafts
    lead = [[next((i for i, r in enumerate(p) if r), len(p)) for p in prompt] for prompt in paths]
    assert rows == [decode_walk(a, 2) for a in lead]


def test_a_tree_within_noise_of_the_best_loses_to_the_smaller_one():
    """Only a few prompts: the best budget's lead over smaller trees is noise, and a smaller tree is chosen."""
    paths = _rank_paths(2, prompts=3, starts=6)
    choice = _choose(paths, _cost(0.0), max_depth=5, topk=4, chain_depth=3)
    assert len(choice.tree) < choice.best_point


def test_trees_never_grow_with_the_batch_size():
    paths = _rank_paths(3)
    choice = _choose(paths, _cost(0.0, batch_sizes=(1, 8, 64), batch_slope=0.4), max_depth=5, topk=4, chain_depth=3)
    budgets = [choice.batch_budgets[b] for b in (1, 8, 64)]
    assert budgets == sorted(budgets, reverse=True) and budgets[0] > budgets[-1]


def test_a_tree_larger_than_the_timed_passes_is_refused():
    with pytest.raises(ValueError, match="timed up to"):
        round_ms(chain_tree(5), [0.1] * 5, [1.0] * 3)


def test_at_batch_size_one_the_timed_tree_engine_iteration_counts_its_bookkeeping():
    """A top-1 tree of depth D costs the tree engine's timed iteration at D; a wider one that, with the
    chain's drafter passes and target pass swapped for its own."""
    import dataclasses

    paths = _rank_paths(5)
    cost = dataclasses.replace(_cost(0.1), tree_pass_ms=(1.0, 1.6, 2.0, 2.5, 2.9, 3.4))
    choice = _choose(paths, cost, max_depth=5, topk=4, chain_depth=2)
    rows = walks(paths, chain_tree(2))
    assert choice.chain_speedup == pytest.approx(sum(t for t, _ in rows) / sum(p for _, p in rows) * 1.0 / 2.0)
    verify, draft = cost.tree_verify_ms_by_batch[0], cost.tree_draft_ms_by_batch[0]
    for candidate in choice.candidates:
        d = shape(candidate.tree).depth
        ms = cost.tree_pass_ms[d] + round_ms(candidate.tree, draft, verify) - round_ms(chain_tree(d), draft, verify)
        assert candidate.speedups[0] == pytest.approx(candidate.decode_accept_len / ms)
    # without the engine's bookkeeping the same trees look cheaper: the overhead lowers every prediction
    bare = _choose(paths, _cost(0.1), max_depth=5, topk=4, chain_depth=2)
    assert all(a.speedups[0] < b.speedups[0] for a, b in zip(choice.candidates[1:], bare.candidates[1:]))


def test_trees_are_scored_on_the_prompts_they_were_not_fitted_to():
    """Even prompts continue with the top guess twice, odd ones with the top guess then the second: a
    2-token tree fitted to either half banks one draft on the other, so that is what it is credited."""
    paths = [[(0, 0)] * 8 if i % 2 == 0 else [(0, 1)] * 8 for i in range(6)]
    choice = _choose(paths, _cost(0.0, budget=3), max_depth=2, topk=2, chain_depth=1)
    assert choice.candidates[2].tree == ((0,), (0, 0))  # fitted on every prompt
    assert choice.candidates[2].decode_accept_len == pytest.approx(2.0)  # one draft a pass, not the 1.5 in-sample


def test_a_tree_is_weighed_against_the_chain_the_depth_choice_serves():
    """A drafter whose q is the target's p, spread evenly over three tokens, at T = 1: sampled chain
    drafts are always kept (the chain of 3 yields 4 tokens a pass), while the target's token is the
    drafter's top guess a third of the time. Counted from the top-1 rank path, as if drafting were
    greedy, the chain looks worse than a tree and the tree would be served; against the chain the
    depth choice serves, the tree loses (here 1.85x against the served chain's 2.91x; the top-1 rank
    path credits that chain with 1.62 tokens a pass, 1.18x)."""
    rng = random.Random(9)
    paths = [[rank_path([rng.randrange(3) for _ in range(3)], 3) for _ in range(40)] for _ in range(12)]
    cost = _cost(0.02)
    ranked = _ranked_chain(paths, 3)
    assert ranked < 1.7
    as_ranked = choose_tree(paths, cost, max_depth=3, topk=3, chain_depth=3, chain_tokens=ranked)
    served = choose_tree(paths, cost, max_depth=3, topk=3, chain_depth=3, chain_tokens=4.0)
    assert as_ranked.served and as_ranked.speedup == served.speedup  # the same tree either way
    assert served.chain_decode_accept_len == 4.0
    assert served.chain_speedup > served.speedup and not served.served
