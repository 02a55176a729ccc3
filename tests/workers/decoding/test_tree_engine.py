"""The tree engine: one target pass under a tree mask, lossless at every temperature.

At temperature 0 its output is the target's greedy decode and a top-1 tree is the chain engine
exactly; at temperature above 0 recursive rejection sampling keeps the target's distribution
(chi-square against the enumerated joint), and the chain's accept rule applied to each sibling
in turn does not.
"""

from __future__ import annotations

import pytest
import torch

import workers.decoding.tree_engine as tree_engine
from pipeline.core.trees import chain_tree
from tests.workers.decoding.test_chain import V, _exact_joint, _tiny_llama, chi2_pvalue
from workers.decoding.chain import generate
from workers.decoding.tree import TreeLayout
from workers.decoding.tree_engine import generate_tree
from workers.drafters.chain.proposer import ChainProposer
from workers.drafters.eagle3.model import drafter_from_target
from workers.drafters.eagle3.train import drafter_config_for
from workers.drafters.standalone.proposer import ModelProposer
from workers.models.features import cached_forward_states

TREE = ((0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0))


def _eagle(target, seed: int = 2):
    cfg = drafter_config_for(target, norm="pre", fc_norm=False, fusion="tri")
    torch.manual_seed(seed)
    return ChainProposer(drafter_from_target(target, cfg).eval())


def _proposers(target, vocab):
    return {
        "eagle": lambda: _eagle(target),
        "model": lambda: ModelProposer(_tiny_llama(1, vocab=vocab, layers=1)),
        "itself": lambda: ModelProposer(target),
    }


@pytest.mark.parametrize("kind", ["eagle", "model", "itself"])
def test_greedy_tree_decoding_is_the_targets_greedy_decode_and_a_top1_tree_is_the_chain(kind):
    target = _tiny_llama(0, vocab=40)
    make = _proposers(target, 40)[kind]
    prompt = torch.tensor([[1, 5, 3, 7, 2]])
    plain, _ = generate(target, make(), prompt, max_new=16, depth=0, temperature=0.0)
    for k in (1, 3):
        chain, chain_acc = generate(target, make(), prompt, max_new=16, depth=k, temperature=0.0)
        tree, tree_acc = generate_tree(target, make(), prompt, max_new=16, tree=chain_tree(k), temperature=0.0)
        assert chain == tree == plain and chain_acc == tree_acc
    out, accepted = generate_tree(target, make(), prompt, max_new=16, tree=TREE, temperature=0.0)
    assert out == plain
    if kind == "itself":  # a drafter that is the target: the top-1 path to the deepest node, every pass
        assert accepted[:-1] == [3] * (len(accepted) - 1)


@torch.no_grad()
def test_eagle_tree_levels_draft_what_steps_along_each_path_draft():
    """Every node's children are the top-m of the drafter after stepping along the node's path alone."""
    target = _tiny_llama(0, vocab=40)
    proposer = _eagle(target)
    prompt = torch.tensor([[1, 5, 3, 7, 2, 9]])
    generate(target, proposer, prompt, max_new=1, depth=1, temperature=0.0)  # start: caches the prompt
    layout = TreeLayout(TREE)
    tokens, qs = proposer.propose_tree(layout, 0.0, None)
    assert qs == {}
    d = proposer.drafter
    for node in range(layout.n + 1):
        kids = layout.children[node]
        if not kids:
            continue
        path = []
        i = node
        while i:
            path.insert(0, tokens[i - 1])
            i = layout.parent[i]
        cache, logits, chain = proposer.cache, proposer.logits, proposer.chain
        for j, tok in enumerate(path):
            cache, logits, chain = d.step(torch.tensor([tok]), chain, cache, proposer.pos + 1 + j)
        assert [tokens[c - 1] for c in kids] == d.full_logits(logits[0].float()).topk(len(kids)).indices.tolist()


@torch.no_grad()
def test_after_a_tree_round_the_drafter_holds_the_accepted_paths_features(monkeypatch):
    """A round that accepts a path off the tree's first branch (node (1,) then (1, 0)) hands the
    EAGLE drafter the target's features at those nodes: its next logits are those of a drafter
    started afresh on the committed tokens and a plain target pass over them, and differ from a
    drafter fed the features at the tree's first positions instead."""
    target = _tiny_llama(0, vocab=40)
    proposer = _eagle(target)
    path = [2, 6]  # node indices in TREE: (1,) and its child (1, 0)

    def take_path(logits, layout, tokens, qs, temperature, gen):
        return path, int(logits[path[-1]].argmax())

    monkeypatch.setattr(tree_engine, "walk_tree", take_path)
    prompt = torch.tensor([[1, 5, 3, 7, 2]])
    out, accepted = generate_tree(target, proposer, prompt, max_new=4, tree=TREE, temperature=0.0)
    assert accepted == [2]  # one round: the root's token, two drafts kept, the target's token
    committed = prompt[0].tolist() + out
    fresh = _eagle(target)
    _, _, streams = cached_forward_states(target, torch.tensor([committed[:-1]]), None, fresh.capture)
    fresh.start(committed, streams)
    assert proposer.pos == fresh.pos
    torch.testing.assert_close(proposer.logits, fresh.logits, atol=1e-4, rtol=1e-4)


def _tree_joint_counts(target, proposer, rounds, temperature, draft_sampling, seed=7):
    prompt = torch.tensor([[1, 5, 3]])
    gen = torch.Generator().manual_seed(seed)
    counts = torch.zeros(V, V, V)
    passes = 0
    for _ in range(rounds):
        out, accepted = generate_tree(
            target,
            proposer,
            prompt,
            max_new=3,
            tree=TREE[:6],
            temperature=temperature,
            gen=gen,
            draft_sampling=draft_sampling,
        )
        counts[tuple(out)] += 1
        passes += len(accepted)
    return counts, passes


def _lossless(counts, joint) -> bool:
    return (
        min(
            chi2_pvalue(counts.sum((0, 2)), joint.sum((0, 2))),
            chi2_pvalue(counts.sum((0, 1)), joint.sum((0, 1))),
            chi2_pvalue(counts.sum(0).flatten(), joint.sum(0).flatten()),
        )
        > 1e-4
    )


@pytest.mark.parametrize(
    "kind,temperature,draft_sampling", [("eagle", 1.0, "sampled"), ("model", 0.7, "sampled"), ("eagle", 0.7, "greedy")]
)
@pytest.mark.slow
def test_sampled_tree_decoding_keeps_the_target_distribution(kind, temperature, draft_sampling):
    target = _tiny_llama(0)
    proposer = _proposers(target, V)[kind]()
    joint = _exact_joint(target, torch.tensor([[1, 5, 3]]), 3, temperature)
    counts, passes = _tree_joint_counts(target, proposer, 600, temperature, draft_sampling)
    assert _lossless(counts, joint)
    assert passes < 600 * 2  # drafts were kept: some passes emitted both tokens


def _chain_rule_on_siblings(p, q, drafts, gen):
    """The chain's accept rule tried on each sibling against the unchanged p and q: biased."""
    for i, x in enumerate(drafts):
        qx = q[x] if q is not None else 1.0
        if float(torch.rand((), generator=gen)) < min(1.0, float(p[x] / qx)):
            return i, x
    residual = (p - (q if q is not None else torch.nn.functional.one_hot(torch.tensor(drafts[-1]), p.numel()))).clamp(
        min=0
    )
    return None, int(torch.multinomial(residual / residual.sum(), 1, generator=gen))


@pytest.mark.slow
def test_the_chain_rule_applied_to_siblings_is_caught(monkeypatch):
    """(Siblings drawn without replacement; at 600 rounds the bias shows at p < 1e-10 on the seeds tried.)"""
    target = _tiny_llama(0)
    joint = _exact_joint(target, torch.tensor([[1, 5, 3]]), 3, 1.0)
    monkeypatch.setattr(tree_engine, "choose_child", _chain_rule_on_siblings)
    counts, _ = _tree_joint_counts(target, ModelProposer(_tiny_llama(1, layers=1)), 600, 1.0, "sampled")
    assert not _lossless(counts, joint)
