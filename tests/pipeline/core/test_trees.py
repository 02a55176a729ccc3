"""Tree shapes and the best tree for a budget, held to brute force on small cases."""

from __future__ import annotations

import itertools
import random

import pytest

from pipeline.core.acceptance import curve_from_accepted
from pipeline.core.trees import (
    best_trees,
    chain_tree,
    check_tree,
    expected_tokens,
    kept,
    prefix_counts,
    rank_path,
    shape,
)


def _closed_trees(max_nodes, max_depth, max_topk):
    """Every tree closed under parents and elder siblings, by brute force over node subsets."""
    universe = [n for d in range(1, max_depth + 1) for n in itertools.product(range(max_topk), repeat=d)]
    for size in range(max_nodes + 1):
        for nodes in itertools.combinations(universe, size):
            try:
                yield check_tree(nodes)
            except ValueError:
                pass


def _paths(seed, n=300, depth=3, topk=3):
    rng = random.Random(seed)
    return [
        rank_path([min(int(rng.expovariate(rng.choice((0.7, 1.5)))), 5) for _ in range(depth)], topk) for _ in range(n)
    ]


@pytest.mark.parametrize("seed,depth,topk", [(0, 3, 2), (1, 2, 3), (2, 3, 2)])
def test_best_trees_match_brute_force_for_every_budget(seed, depth, topk):
    paths = _paths(seed, depth=depth + 1, topk=topk + 1)  # deeper and wider than allowed: the limits bite
    counts = prefix_counts(paths)
    best = best_trees(counts, 6, max_depth=depth, max_topk=topk)
    trees = list(_closed_trees(6, depth, topk))
    for n in range(7):
        brute = max(expected_tokens(t, counts, len(paths)) for t in trees if len(t) <= n)
        assert expected_tokens(best[n], counts, len(paths)) == pytest.approx(brute)
        assert len(best[n]) <= n
        assert check_tree(best[n]) == best[n]
        # the expected tokens are the mean of what the tree keeps at each start, plus the target's token
        assert expected_tokens(best[n], counts, len(paths)) == pytest.approx(
            1 + sum(kept(p, set(best[n])) for p in paths) / len(paths)
        )
        assert shape(best[n]).depth <= depth and shape(best[n]).topk <= topk


def test_top1_tree_is_the_chain_curve():
    """A chain start keeps as many drafts under chain_tree(k) as its leading top-1 ranks, capped at k."""
    paths = _paths(4, depth=5)
    accepted = [next((i for i, r in enumerate(p) if r != 0), len(p)) for p in paths]
    curve = curve_from_accepted(accepted, 5, condition="default", temperature=0.0)
    counts = prefix_counts(paths)
    for k in range(6):
        assert expected_tokens(chain_tree(k), counts, len(paths)) == pytest.approx(curve.accept_len[k])


def test_shape_and_rank_path():
    tree = check_tree([(0, 0), (1,), (0,), (0, 1), (0, 0, 0)])
    assert tree == ((0,), (1,), (0, 0), (0, 1), (0, 0, 0))
    assert shape(tree).depth == 3 and shape(tree).topk == 2 and shape(tree).widths == (2, 2, 1)
    assert rank_path([0, 2, 1, 0], 2) == (0,) and rank_path([1, 1], 2) == (1, 1)
    assert kept((0, 1, 0), set(tree)) == 2 and kept((2,), set(tree)) == 0


@pytest.mark.parametrize(
    "nodes,message",
    [
        ([(0,), (0, 1)], "elder sibling"),
        ([(0, 0)], "no parent"),
        ([()], "root"),
        ([(0,), (0,)], "twice"),
        ([(0,), (-1,)], "whole number"),
    ],
)
def test_bad_trees_are_refused(nodes, message):
    with pytest.raises(ValueError, match=message):
        check_tree(nodes)
