"""Draft-OPD's rollouts record what the engine drafted and accepted, and the replay's loss is the
hand-computed one: forward KL on the accepted stream, decayed reverse KL on the rejected one."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tests.workers.decoding.test_chain import _tiny_llama
from workers.drafters.chain.proposer import ChainProposer
from workers.drafters.eagle3.model import drafter_from_target
from workers.drafters.eagle3.train import drafter_config_for
from workers.drafters.opd.batch import replay_batch
from workers.drafters.opd.replay import ReplayChain, ReplayWeights, fed_tokens, replay_loss
from workers.drafters.opd.rollout import roll_out
from workers.models.features import target_pass

V = 40


def _pairing(seed: int = 0):
    target = _tiny_llama(seed, vocab=V)
    drafter = drafter_from_target(target, drafter_config_for(target, norm="post", fc_norm=True, fusion="tri")).eval()
    return target, drafter


def _kl(p: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    return (p * (p.log() - logq)).sum()


def _rkl(logq: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    return (logq.exp() * (logq - p.log())).sum()


def test_the_loss_on_a_toy_case_is_the_hand_computed_one():
    """Two chains in two rows: one whose second draft was rejected (n = 1 of 3), one kept whole (n = 2 of
    2). q at each step comes from running the drafter incrementally, fed the chain's own drafts."""
    target, drafter = _pairing()
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(V, (2, 14), generator=gen)
    streams, _ = target_pass(target, ids, drafter.cfg.capture_layers)
    p = [torch.softmax(torch.randn(3, V, generator=gen) * 2, -1), torch.softmax(torch.randn(2, V, generator=gen), -1)]
    wrong = (int(ids[0, 7]) + 1) % V
    chains = [
        ReplayChain(0, 4, (int(ids[0, 6]), wrong, 5), 1, p[0]),  # draft 0 is the text's, draft 1 was rejected
        ReplayChain(1, 6, (int(ids[1, 8]), int(ids[1, 9])), 2, p[1]),
    ]
    weights = ReplayWeights(decay=0.8, accepted=1.0, rejected=2.0)
    loss, stats = replay_loss(drafter, ids, streams, chains, weights)

    def qs(row: int, start: int, drafts) -> list[torch.Tensor]:
        g0 = drafter.fuse([s[row : row + 1, :-1] for s in streams])
        cache, logits, chain = drafter.prefill(ids[row : row + 1, 1 : start + 2], g0[:, : start + 1])
        out = [F.log_softmax(logits[0], -1)]
        for s, token in enumerate(drafts[:-1]):
            cache, logits, chain = drafter.step(torch.tensor([token]), chain, cache, start + 1 + s)
            out.append(F.log_softmax(logits[0], -1))
        return out

    with torch.no_grad():
        q0, q1 = qs(0, 4, chains[0].drafts), qs(1, 6, chains[1].drafts)
        accepted = _kl(p[0][0], q0[0]) + _kl(p[0][1], q0[1]) + _kl(p[1][0], q1[0]) + _kl(p[1][1], q1[1])
        rejected = 0.8 * _rkl(q0[1], p[0][1]) + 0.64 * _rkl(q0[2], p[0][2])
        want = (accepted + 2.0 * rejected) / (4 * 1.0 + 2.0 * (0.8 + 0.64))
    torch.testing.assert_close(loss.detach(), want, atol=1e-5, rtol=1e-5)
    assert (stats["accepted_positions"], stats["rejected_positions"]) == (4, 2)
    loss.backward()
    assert drafter.fc.weight.grad is not None and drafter.fc.weight.grad.abs().sum() > 0


def test_rollouts_record_what_the_engine_drafted_and_the_replay_drafts_it_again():
    """Greedy rollouts: the rounds rebuild the decoded text, the replayed drafter's argmax at every step
    of every chain is the draft the engine proposed there, and p is the target's own distribution
    after the anchor and the drafts before it (recomputed by a plain forward)."""
    target, drafter = _pairing(2)
    prompts = [torch.tensor([1, 5, 7, 9, 2]), torch.tensor([3, 3, 8])]
    rollouts = roll_out(target, ChainProposer(drafter), prompts, depth=3, max_new=20, temperature=0.0)
    for prompt, r in zip(prompts, rollouts):
        assert r.ids[: r.prompt_len].tolist() == prompt.tolist() and r.ids.numel() >= r.prompt_len + 20
        text = r.ids.tolist()
        for v in r.rounds:
            assert text[v.anchor + 1 : v.anchor + 1 + v.accepted] == v.drafts[: v.accepted]
            assert text[v.anchor + 1 + v.accepted] == v.emitted
    ids, streams, chains = replay_batch(target, rollouts, drafter.cfg.capture_layers, None)
    assert len(chains) == sum(len(r.rounds) for r in rollouts)
    assert any(0 < ch.accepted < 3 for ch in chains)  # partial acceptance is exercised
    fed = iter(fed_tokens(ids, chains, 3))
    with torch.no_grad():
        g0 = drafter.fuse([s[:, :-1] for s in streams])
        outs = drafter.forward_steps(ids[:, 1:], g0, 3, pick=lambda logits: next(fed))
        for ch in chains:
            row = ids[ch.row].tolist()
            for s, token in enumerate(ch.drafts):
                assert int(outs[s].logits[ch.row, ch.start + s].argmax()) == token, (ch.start, s)
                want = target(input_ids=torch.tensor([row[: ch.start + 2] + list(ch.drafts[:s])])).logits[0, -1]
                torch.testing.assert_close(ch.p[s], torch.softmax(want, -1), atol=1e-5, rtol=1e-4)


def test_the_random_anchor_ablation_moves_only_the_accepted_stream():
    """Same rollouts: every chain with a rejection keeps its place for the rejected stream only; each
    chain's accepted stream (n + 1 positions, at most k) moves to a random start of its own row,
    teacher-forced on the text against the target's distribution there, where no kept rejected stream
    would feed it one of its wrong drafts."""
    target, drafter = _pairing(2)
    prompts = [torch.tensor([1, 5, 7, 9, 2]), torch.tensor([3, 3, 8])]
    rollouts = roll_out(target, ChainProposer(drafter), prompts, depth=3, max_new=30, temperature=0.0)
    ids, _, true = replay_batch(target, rollouts, drafter.cfg.capture_layers, None)
    _, _, moved = replay_batch(target, rollouts, drafter.cfg.capture_layers, None, torch.Generator().manual_seed(0))
    kept = [ch for ch in moved if not ch.accepted_stream]
    assert [(c.row, c.start, c.drafts) for c in kept] == [(c.row, c.start, c.drafts) for c in true if c.accepted < 3]
    relocated = [ch for ch in moved if ch.accepted_stream]
    assert sorted(len(c.drafts) for c in relocated) == sorted(min(c.accepted + 1, 3) for c in true)
    assert {(c.row, c.start) for c in relocated} != {(c.row, c.start) for c in true if c.accepted}  # they moved
    forced = fed_tokens(ids, moved, 3)
    for ch in kept:  # every kept rejected stream is still fed its own drafts, wrong ones included
        for s, token in enumerate(ch.drafts[:-1]):
            assert int(forced[s][ch.row, ch.start + s]) == token
    with torch.no_grad():
        for ch in relocated:
            assert ch.accepted == len(ch.drafts)
            for s, token in enumerate(ch.drafts[:-1]):  # what its next step is fed: the text, not a wrong draft
                assert int(forced[s][ch.row, ch.start + s]) == token
            row = ids[ch.row].tolist()
            assert list(ch.drafts) == row[ch.start + 2 : ch.start + 2 + len(ch.drafts)]
            logits = target(input_ids=ids[ch.row : ch.row + 1]).logits[0]
            torch.testing.assert_close(ch.p, torch.softmax(logits[ch.start + 1 : ch.start + 1 + len(ch.drafts)], -1))
