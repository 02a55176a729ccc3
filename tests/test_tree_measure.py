"""Rank paths: the rank of the target's own token at every step, the drafter fed the target's tokens,
equals what the incremental drafter computes walking that path one step at a time."""
from __future__ import annotations

import torch

from tests.test_engine import _tiny_llama
from tests.test_tree_engine import _eagle
from workers.chains import eagle_ranks, model_ranks, ranks_of
from workers.features import cached_forward_states, target_pass


@torch.no_grad()
def test_eagle_and_model_ranks_follow_the_targets_path_step_by_step():
    target = _tiny_llama(0, vocab=40)
    seq = torch.randint(3, 40, (1, 20), generator=torch.Generator().manual_seed(5))
    starts, depth = [6, 9, 13], 4
    proposer = _eagle(target)
    drafter = proposer.drafter
    streams, _ = target_pass(target, seq, drafter.cfg.capture_layers)
    eagle = eagle_ranks(drafter, seq, streams, depth, starts)
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
