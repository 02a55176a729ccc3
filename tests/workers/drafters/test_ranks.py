"""Rank paths: the rank of the target's own token at every step, the drafter fed the target's tokens,
equals what the incremental drafter computes walking that path one step at a time."""

from __future__ import annotations

import torch

from tests.workers.decoding.test_chain import _tiny_llama
from tests.workers.decoding.test_tree_engine import _eagle
from workers.drafters.chain.drafting import chain_ranks, fuse_context
from workers.drafters.ranks import ranks_of
from workers.drafters.standalone.chains import model_ranks
from workers.models.features import cached_forward_states, target_pass


@torch.no_grad()
def test_eagle_and_model_ranks_follow_the_targets_path_step_by_step():
    target = _tiny_llama(0, vocab=40)
    seq = torch.randint(3, 40, (1, 20), generator=torch.Generator().manual_seed(5))
    starts, depth = [6, 9, 13], 4
    proposer = _eagle(target)
    drafter = proposer.drafter
    streams, _ = target_pass(target, seq, drafter.cfg.capture_layers)
    eagle = chain_ranks(drafter, seq, fuse_context(drafter, streams), depth, starts)
    model = _tiny_llama(1, vocab=40, layers=1)
    plain = model_ranks(model, seq, depth, starts)
    for n, c in enumerate(starts):
        proposer.start(seq[0, : c + 2].tolist(), [s[:, : c + 1] for s in streams])
        cache, logits, chain = proposer.cache, proposer.logits, proposer.chain
        out, mcache, _ = cached_forward_states(model, seq[:, : c + 2])
        for s in range(depth):
            truth = seq[0, c + 2 + s][None]
            assert int(ranks_of(drafter.full_logits(logits.float()), truth)) == int(eagle[n, s])
            assert int(ranks_of(out[:, -1].float(), truth)) == int(plain[n, s])
            cache, logits, chain = drafter.step(truth, chain, cache, proposer.pos + 1 + s)
            out, mcache, _ = cached_forward_states(model, truth[None], mcache)
    assert (eagle > 0).any() and (plain > 0).any()  # untrained drafters: the target's token is often not the top guess


def test_the_walk_over_measured_rank_paths_is_what_the_tree_engine_does():
    """At temperature 0, the drafts the tree engine keeps pass by pass are what each round's rank path
    keeps under the tree: the prediction of tokens per pass is the engine's, exactly."""
    from pipeline.core.trees import kept, rank_path
    from workers.decoding.tree_engine import generate_tree
    from workers.measure.curves import continue_text

    target = _tiny_llama(0, vocab=40)
    proposer = _eagle(target)
    K, n_cont, topk = 4, 40, 3
    prompt = torch.tensor([[1, 5, 3, 7, 2, 9]])
    p_len = prompt.shape[1]
    seq = continue_text(target, prompt, n_cont + K, 0.0, None)
    starts = list(range(p_len - 1, p_len - 1 + n_cont))
    streams, _ = target_pass(target, seq, proposer.drafter.cfg.capture_layers)
    paths = [
        rank_path(r, topk)
        for r in chain_ranks(proposer.drafter, seq, fuse_context(proposer.drafter, streams), K, starts).tolist()
    ]
    assert sum(1 for p in paths if p and p[0] > 0) >= 3  # second and third guesses to bank
    for tree in (((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)), ((0,), (1,), (2,), (0, 0), (2, 0), (0, 0, 0))):
        _, engine = generate_tree(target, _eagle(target), prompt, max_new=n_cont + 1, tree=tree, temperature=0.0)
        walk, c = [], 0
        while c < n_cont:
            walk.append(kept(paths[c], set(tree)))
            c += walk[-1] + 1
        assert engine == walk, tree
        assert any(walk)
