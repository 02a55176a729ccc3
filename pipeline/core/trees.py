"""Pure maths of draft trees: their shape, the tokens a tree banks per target pass, the best tree
for a budget of draft tokens.

Serving engines draft trees, not only chains: the drafter's top-k at each step, every branch
verified in one target pass under a tree attention mask, so a miss on the top guess can still
bank the second. specfleet chooses the tree shape the way it chooses the depth.

A tree is a tuple of nodes below an implicit root (the last token the target emitted). A node
is the path of drafter ranks that leads to it: (0,) is the drafter's top guess for the next
token, (1,) its second, (0, 2) the third guess after the top one. This is the form vLLM's
`speculative_token_tree` and TensorRT-LLM's `eagle_choices` take. A tree must be closed under
prefixes (a node's parent is in it) and under elder siblings ((0, 2) needs (0, 1)): siblings
are drafted in rank order, and the verifier tries them in that order. The chain of depth k is
the tree (0,), (0, 0), ... of k nodes.

Measurement gives, for every chain start, its *rank path*: the rank of the target's own token
in the drafter's proposals at each step, the drafter fed the target's tokens, up to the first
step where that rank lies past the top-k kept. At temperature 0, and at temperature above 0
when siblings are the drafter's top-k verified as one-hot drafts (what the engines do), a tree
banks the longest prefix of the rank path that is one of its nodes: exactly, with whatever
dependence along the path the data holds. A node's value is the share of chain starts whose
rank path begins with it; a tree's expected drafts kept per pass is the sum of its nodes'
values, its tokens per pass one more (the target's own token).

The rank paths are measured beside the chain curve (`evaluation.tree_topk`, the top-k kept;
workers/drafters/ranks.py). The database keeps acceptance by rank and depth (`rank_accepts`)
beside each curve, and MLflow keeps it as `rank_accept/r<rank>` series. A tree of top-1 nodes
is the chain, so the chain curve stays as it is. A dynamic programme over the trie of measured
rank paths gives, for every budget n of draft tokens up to `cost.tree_budget`, the tree with
the most drafts kept; the tests hold it equal to brute force.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache

Node = tuple[int, ...]
Tree = tuple[Node, ...]


def chain_tree(depth: int) -> Tree:
    """The chain of `depth` drafts as a tree: each node the top guess after the one before."""
    return tuple((0,) * d for d in range(1, depth + 1))


def check_tree(nodes: Iterable[Sequence[int]]) -> Tree:
    """The tree in breadth-first order (by depth, then by ranks), or ValueError naming what is wrong."""
    listed = [tuple(n) for n in nodes]
    tree = tuple(sorted(set(listed), key=lambda n: (len(n), n)))
    if len(tree) != len(listed):
        raise ValueError("tree: a node is listed twice")
    present = set(tree)
    for node in tree:
        if not node:
            raise ValueError("tree: the root () is implicit; list only draft nodes")
        if any(not isinstance(r, int) or r < 0 for r in node):
            raise ValueError(f"tree: node {list(node)} has a rank that is not a whole number >= 0")
        if len(node) > 1 and node[:-1] not in present:
            raise ValueError(f"tree: node {list(node)} has no parent {list(node[:-1])}")
        if node[-1] > 0 and node[:-1] + (node[-1] - 1,) not in present:
            raise ValueError(f"tree: node {list(node)} has no elder sibling {list(node[:-1] + (node[-1] - 1,))}")
    return tree


@dataclass(frozen=True)
class Shape:
    """What an engine's flags say about a tree."""

    depth: int  # drafting steps (the deepest node's depth)
    topk: int  # the most siblings under one node
    nodes: int  # draft tokens verified beside the root
    widths: tuple[int, ...]  # nodes at depth 1..depth: one drafter pass each


def shape(tree: Tree) -> Shape:
    depth = max((len(n) for n in tree), default=0)
    widths = tuple(sum(1 for n in tree if len(n) == d) for d in range(1, depth + 1))
    children = Counter(n[:-1] for n in tree)
    return Shape(depth=depth, topk=max(children.values(), default=0), nodes=len(tree), widths=widths)


def kept(rank_path: Sequence[int], tree: frozenset[Node] | set[Node]) -> int:
    """Drafts a tree keeps for one chain start: the longest prefix of its rank path in the tree."""
    n = 0
    while n < len(rank_path) and tuple(rank_path[: n + 1]) in tree:
        n += 1
    return n


def prefix_counts(rank_paths: Iterable[Sequence[int]]) -> Counter:
    """How many chain starts' rank paths begin with each node."""
    counts: Counter = Counter()
    for path in rank_paths:
        for d in range(1, len(path) + 1):
            counts[tuple(path[:d])] += 1
    return counts


def expected_tokens(tree: Tree, counts: Counter, starts: int) -> float:
    """Tokens per target pass of `tree`, averaged over the chain starts: 1 + the sum of node values."""
    return 1.0 + sum(counts.get(n, 0) for n in tree) / starts


def best_trees(counts: Counter, budget: int, *, max_depth: int, max_topk: int) -> list[Tree]:
    """The tree of at most n nodes with the most drafts kept, for every n = 0..budget.

    A dynamic programme over the trie of measured rank paths: a node's subtree with b nodes is
    the node and the best split of b - 1 nodes over a run of its children taken in rank order
    (elder siblings first), so every tree it returns is closed under parents and elder siblings.
    Nodes deeper than max_depth or ranked at max_topk and beyond are never used; on equal value
    the tree with fewer nodes wins.
    """
    if budget < 0 or max_depth < 0 or max_topk < 0:
        raise ValueError("budget, max_depth and max_topk must be >= 0")
    children: dict[Node, int] = {}  # node -> how many ranks below it carry any count
    for node in counts:
        if len(node) <= max_depth and node[-1] < max_topk:
            parent = node[:-1]
            children[parent] = max(children.get(parent, 0), node[-1] + 1)

    @cache
    def subtree(node: Node, b: int) -> tuple[int, Tree]:
        """Best (value, nodes) of `node` and at most b - 1 nodes below it (b >= 1)."""
        value, below = run(node, 0, b - 1)
        return counts.get(node, 0) + value, (node,) + below

    @cache
    def run(parent: Node, rank: int, b: int) -> tuple[int, Tree]:
        """Best (value, nodes) of children parent+(rank,), parent+(rank+1,), ... within b nodes."""
        if b <= 0 or rank >= children.get(parent, 0) or len(parent) >= max_depth:
            return 0, ()
        best: tuple[int, Tree] = (0, ())
        for t in range(1, b + 1):
            v1, n1 = subtree(parent + (rank,), t)
            v2, n2 = run(parent, rank + 1, b - t)
            if v1 + v2 > best[0]:
                best = (v1 + v2, n1 + n2)
        return best

    return [check_tree(run((), 0, n)[1]) for n in range(budget + 1)]


def rank_path(ranks: Sequence[int], topk: int) -> tuple[int, ...]:
    """A chain start's rank path: its ranks up to (not including) the first one at topk or beyond."""
    out = []
    for r in ranks:
        if r >= topk:
            break
        out.append(int(r))
    return tuple(out)


def rank_accepts(rank_paths: Sequence[Sequence[int]], depth: int, topk: int) -> list[tuple[int, int, float]]:
    """Acceptance by rank and depth: (d, r, share) for d = 1..depth and r = 0..topk - 1, where share is
    P(the target's token is the drafter's rank-r proposal at step d | it was within the top-k at
    every step before d). Depths no chain start reached are left out."""
    out = []
    for d in range(1, depth + 1):
        reached = [p for p in rank_paths if len(p) >= d - 1]
        if not reached:
            break
        for r in range(topk):
            out.append((d, r, sum(1 for p in reached if len(p) >= d and p[d - 1] == r) / len(reached)))
    return out
