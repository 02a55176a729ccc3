"""A draft tree laid out for one drafting round: node indices, parents, depths, masks, and how
siblings are drawn.

Index 0 is the root (the last token the target emitted); nodes 1..n follow in breadth-first
order (pipeline/core/trees.py). Siblings are drawn from their parent's distribution in rank
order: the top-m at temperature 0 or with greedy drafts, m draws without replacement otherwise
(the Gumbel top-m trick: perturbed logits sorted give the draws in the order they were made).
"""

from __future__ import annotations

import torch

from pipeline.core.trees import Tree, check_tree


class TreeLayout:
    def __init__(self, tree: Tree):
        self.tree = check_tree(tree)
        index = {(): 0} | {node: i + 1 for i, node in enumerate(self.tree)}
        self.n = len(self.tree)
        self.parent = [-1] + [index[node[:-1]] for node in self.tree]
        self.depth = [0] + [len(node) for node in self.tree]
        self.children: list[list[int]] = [[] for _ in range(self.n + 1)]
        for node in self.tree:  # breadth-first, so siblings arrive in rank order
            self.children[index[node[:-1]]].append(index[node])
        seen = torch.eye(self.n + 1, dtype=torch.bool)  # row i: i and its ancestors
        for i in range(1, self.n + 1):
            seen[i] |= seen[self.parent[i]]
        self.ancestry = seen
        self.max_depth = max(self.depth)

    def level(self, d: int) -> list[int]:
        """Node indices at depth d, in breadth-first order."""
        return [i for i in range(self.n + 1) if self.depth[i] == d]


def draw_children(logits: torch.Tensor, m: int, temperature: float, gen) -> tuple[list[int], torch.Tensor | None]:
    """m sibling drafts from one distribution, in draw order, and the q they were drawn from
    (None when they are the top-m, verified one-hot). logits: [V] over the target's vocabulary."""
    if temperature == 0:  # the top-m, ties to the lower token id (as argmax and the measured ranks)
        return torch.sort(logits, descending=True, stable=True).indices[:m].tolist(), None
    scaled = logits.float() / temperature
    u = torch.rand(scaled.shape, generator=gen).to(scaled.device).clamp(min=1e-20, max=1 - 1e-7)
    order = (scaled - torch.log(-torch.log(u))).topk(m).indices.tolist()
    return order, torch.softmax(scaled, dim=-1)


def draw_level(layout: TreeLayout, d: int, logits: dict, tokens: list[int], qs: dict, temperature: float, gen) -> None:
    """Draw the nodes at depth d from their parents' logits ({node index: [V]}) into `tokens`, and
    the q each parent's children were drawn from into `qs`."""
    for parent in layout.level(d - 1):
        kids = layout.children[parent]
        if kids:
            drawn, q = draw_children(logits[parent], len(kids), temperature, gen)
            for c, tok in zip(kids, drawn):
                tokens[c] = tok
            if q is not None:
                qs[parent] = q
