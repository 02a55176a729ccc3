"""The draft tree a pairing's choice carries, and the one rule for when serving runs it.

`TreeChoice` is what `pipeline/core/tree_choice.py` returns and `Selected.tree` stores; `serves_tree`
decides, from a choice or from a stored row, whether a tree is served instead of the chain. Both
sit apart from the job contracts (`pipeline/core/contracts.py`) so that the tree's rule reads in one place.
"""

from __future__ import annotations

from pipeline.core.contract_base import Contract
from pipeline.core.trees import chain_tree


class TreeCandidate(Contract):
    """The best tree of one budget of draft tokens (pipeline/core/trees.py)."""

    tree: tuple[tuple[int, ...], ...]
    decode_accept_len: float  # a decoder's tokens per target pass drafting it, on the measured prompts
    speedups: tuple[float, ...]  # predicted, per profiled batch size


class TreeChoice(Contract):
    """The draft tree chosen for the primary curve (pipeline/core/tree_choice.py): candidates[n] is
    the best tree of at most n nodes; the choice is made per batch size as the depth is."""

    tree: tuple[tuple[int, ...], ...]  # at batch size 1
    decode_accept_len: float
    speedup: float  # predicted over plain decoding, batch size 1
    best_point: int  # the budget with the highest point estimate (the tree may be smaller: noise)
    chain_depth: int  # the chain it is compared with: the chosen depth, costed as the top-1 tree
    chain_decode_accept_len: float
    chain_speedup: float
    candidates: tuple[TreeCandidate, ...]
    batch_budgets: dict[int, int]  # batch size profiled -> the budget chosen there (its tree: candidates[n])
    chain_speedups: tuple[float, ...]  # the chain's predicted speedup per profiled batch size

    @property
    def over_chain(self) -> float:
        return self.speedup / self.chain_speedup

    @property
    def all_batches(self) -> bool:
        """Whether every profiled batch size chose this same tree."""
        return len({self.candidates[n].tree for n in self.batch_budgets.values()}) == 1

    @property
    def served(self) -> bool:
        return serves_tree(self.tree, self.speedup, self.chain_speedup, self.all_batches)


def serves_tree(tree, speedup: float | None, chain_speedup: float | None, all_batches: bool | None) -> bool:
    """Whether serving runs a chosen tree rather than the chain: it branches somewhere, is predicted to
    beat the chain, and was chosen at every profiled batch size (a tree chosen at batch size 1 only
    gives way to the smaller ones larger batches chose). A tree of top-1 nodes only is a chain, whose
    depth the depth choice weighed on the chain engine's own pass costs: it is never served as a
    tree. `autotune` writes a tree only when served, and the validation holds a tree to its bar only then."""
    nodes = tuple(map(tuple, tree or ()))  # a stored row holds lists
    branches = nodes != chain_tree(len(nodes))  # the empty tree is the chain of 0
    return branches and speedup is not None and bool(chain_speedup) and speedup > chain_speedup and bool(all_batches)
