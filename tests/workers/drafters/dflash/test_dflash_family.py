"""A DFlash drafter in the engine and the measurements: lossless greedy decoding, the curve's chains
equal to what the engine drafts, costs with one drafter pass a round, and the spec's limits."""

from __future__ import annotations

import copy

import pytest
import torch

from pipeline.core.choice import batch_speedup, leviathan_cost
from pipeline.core.settings import Evaluation
from workers.decoding.chain import generate
from workers.drafters.registry import family_of
from workers.measure.curves import continue_text, measure_curves

EVAL = Evaluation(
    max_depth=4,
    temperatures=[0.0],
    num_prompts=3,
    prompt_len=20,
    continuation_len=8,
    corpus="stdlib",
    conditions=["default"],
    long_context_len=64,
)


def _prompt(tokenizer, text="def parse(self, line):\n    "):
    return torch.tensor([[tokenizer.bos_token_id] + tokenizer(text, add_special_tokens=False)["input_ids"]])


def _run_as(drafter, block_drafting: str):
    """A copy of the shared drafter run with `block_drafting` (as the family's load sets it from the spec)."""
    drafter = copy.deepcopy(drafter)
    drafter.block_drafting = block_drafting
    return drafter


@pytest.mark.parametrize("block_drafting", ["trained", "depth"])
def test_greedy_decoding_with_a_block_drafter_is_the_targets_own(tiny_target, tiny_dflash, block_drafting):
    target, tokenizer, _ = tiny_target
    drafter = _run_as(tiny_dflash[0], block_drafting)
    for text in ("def parse(self, line):\n    ", "import os\nclass Reader:\n"):
        prompt = _prompt(tokenizer, text)
        reference = continue_text(target, prompt, 30, 0.0, None)[0, prompt.shape[1] :].tolist()
        for depth in (1, 2, 4):
            out, accepted = generate(
                target, family_of("dflash").proposer(drafter), prompt, max_new=30, depth=depth, temperature=0.0
            )
            assert out == reference, (text, depth)
            assert all(0 <= a <= depth for a in accepted)
    with pytest.raises(ValueError, match="at most 4 tokens"):
        generate(target, family_of("dflash").proposer(drafter), prompt, max_new=4, depth=5, temperature=0.0)


@torch.no_grad()
@pytest.mark.parametrize("block_drafting", ["trained", "depth"])
def test_the_curves_chains_are_what_the_engine_drafts(tiny_target, tiny_dflash, block_drafting):
    """At every depth the measured chains' drafts and q are the engine proposer's: the first k of the
    trained block, or (`depth`) a block of k + 1 of their own, whose q differs from the first k."""
    from workers.models.features import target_pass

    target, tokenizer, _ = tiny_target
    drafter = _run_as(tiny_dflash[0], block_drafting)
    prompt = _prompt(tokenizer)
    seq = continue_text(target, prompt, 12, 0.0, None)
    starts = list(range(3, seq.shape[1] - 6))
    chains = family_of("dflash").chains(drafter, target, 4)
    drafts, deepest = chains.draft(seq, starts, 0.0, None, None)
    streams, _ = target_pass(target, seq, drafter.cfg.capture_layers)
    for k in (1, 2, 3):
        _, logits = chains.draft_depth(k, 0.0, None)
        assert torch.allclose(logits, deepest[:, :k]) == (block_drafting == "trained"), k
        for n, c in enumerate(starts):
            proposer = family_of("dflash").proposer(drafter)
            proposer.start(seq[0, : c + 2].tolist(), [s[:, : c + 1] for s in streams])
            _, q = proposer.propose(k, 1.0, torch.Generator().manual_seed(0))
            torch.testing.assert_close(q, torch.softmax(logits[n], dim=-1), atol=1e-5, rtol=1e-4)
    for n, c in enumerate(starts):
        proposer = family_of("dflash").proposer(drafter)
        proposer.start(seq[0, : c + 2].tolist(), [s[:, : c + 1] for s in streams])
        assert proposer.propose(4, 0.0, None)[0] == drafts[n].tolist(), c


@pytest.mark.parametrize("block_drafting", ["trained", "depth"])
def test_the_decode_walk_of_each_depth_is_what_the_engine_does(tiny_target, tiny_dflash, block_drafting, monkeypatch):
    """At temperature 0 the curve's walk at every depth is the engine's passes at that depth, whether the
    drafter fills its trained block (a depth's chains are the deepest ones' first drafts) or drafts a
    block of depth + 1 (each depth's chains drafted and verified on their own)."""
    from workers.data.prompts import build_prompts
    from workers.drafters.dflash.chains import BlockChains

    target, tokenizer, _ = tiny_target
    drafter = _run_as(tiny_dflash[0], block_drafting)
    drafted, draft_depth = [], BlockChains.draft_depth
    monkeypatch.setattr(BlockChains, "draft_depth", lambda self, k, *a: drafted.append(k) or draft_depth(self, k, *a))
    ((curve, _, _, walks, _),) = measure_curves(
        target=target, drafter=drafter, family=family_of("dflash"), tokenizer=tokenizer, evaluation=EVAL, seed=0
    )
    prompts = build_prompts(
        tokenizer,
        corpus=EVAL.corpus,
        condition="default",
        num_prompts=EVAL.num_prompts,
        prompt_len=EVAL.prompt_len,
        long_context_len=EVAL.long_context_len,
        seed=0,
    )
    for prompt, walk in zip(prompts, walks):
        for k in range(EVAL.max_depth + 1):
            _, engine = generate(
                target,
                family_of("dflash").proposer(drafter),
                prompt[None],
                max_new=EVAL.continuation_len + 1,
                depth=k,
                temperature=0.0,
            )
            assert list(walk[k]) == [sum(engine) + len(engine), len(engine)], k
    # each smaller depth's chains were drafted on their own, for every prompt, only when run so
    assert drafted == ([1, 2, 3] * EVAL.num_prompts if block_drafting == "depth" else [])


def test_the_curve_of_a_block_drafter(tiny_target, tiny_dflash):
    target, tokenizer, _ = tiny_target
    drafter, _ = tiny_dflash
    ((curve, diagnostics, *_),) = measure_curves(
        target=target, drafter=drafter, family=family_of("dflash"), tokenizer=tokenizer, evaluation=EVAL, seed=0
    )
    assert curve.num_chains == EVAL.num_prompts * EVAL.continuation_len and diagnostics == []
    assert all(a >= b for a, b in zip(curve.survival, curve.survival[1:])) and curve.survival[0] > 0


def test_the_cost_profile_times_one_block_pass(tiny_target, tiny_dflash):
    from workers.measure.cost import profile_cost

    target, tokenizer, _ = tiny_target
    drafter, _ = tiny_dflash
    prompts = [torch.tensor(tokenizer("def f(x):\n    return x + 1\n")["input_ids"]) for _ in range(2)]
    cost = profile_cost(
        target=target,
        drafter=drafter,
        family=family_of("dflash"),
        context_len=32,
        max_depth=4,
        warmup=1,
        repeats=2,
        seed=0,
        prompts=prompts,
        new_tokens=4,
        batch_sizes=(1, 2),
    )
    assert cost.one_pass and cost.draft_ms > 0 and len(cost.pass_ms) == 5 and len(cost.draft_ms_by_batch) == 2


def test_a_round_of_a_one_pass_drafter_costs_one_draft_pass():
    tokens, verify = [1.0, 1.8, 2.4, 2.8], [10.0, 11.0, 12.0, 13.0]
    chain = batch_speedup(tokens, draft_ms=2.0, verify_ms=verify)
    block = batch_speedup(tokens, draft_ms=2.0, verify_ms=verify, one_pass=True)
    assert chain == [1.0, 1.8 * 10 / 13, 2.4 * 10 / 16, 2.8 * 10 / 19]
    assert block == [1.0, 1.8 * 10 / 13, 2.4 * 10 / 14, 2.8 * 10 / 15]
    assert leviathan_cost(0.2, 4, one_pass=True) == [1.0, 1.2, 1.2, 1.2]
    assert leviathan_cost(0.5, 3) == [1.0, 1.5, 2.0]
