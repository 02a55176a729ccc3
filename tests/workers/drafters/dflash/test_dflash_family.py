"""A DFlash drafter in the engine and the measurements: lossless greedy decoding, the curve's chains
equal to what the engine drafts, costs with one drafter pass a round, and the spec's limits."""

from __future__ import annotations

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


def test_greedy_decoding_with_a_block_drafter_is_the_targets_own(tiny_target, tiny_dflash):
    target, tokenizer, _ = tiny_target
    drafter, _ = tiny_dflash
    for text in ("def parse(self, line):\n    ", "import os\nclass Reader:\n"):
        prompt = _prompt(tokenizer, text)
        reference = continue_text(target, prompt, 30, 0.0, None)[0, prompt.shape[1] :].tolist()
        for depth in (1, 4):
            out, accepted = generate(
                target, family_of("dflash").proposer(drafter), prompt, max_new=30, depth=depth, temperature=0.0
            )
            assert out == reference, (text, depth)
            assert all(0 <= a <= depth for a in accepted)
    with pytest.raises(ValueError, match="at most 4 tokens"):
        generate(target, family_of("dflash").proposer(drafter), prompt, max_new=4, depth=5, temperature=0.0)


@torch.no_grad()
def test_the_curves_chains_are_what_the_engine_drafts(tiny_target, tiny_dflash):
    from workers.models.features import target_pass

    target, tokenizer, _ = tiny_target
    drafter, _ = tiny_dflash
    prompt = _prompt(tokenizer)
    seq = continue_text(target, prompt, 12, 0.0, None)
    starts = list(range(3, seq.shape[1] - 6))
    drafts, _ = family_of("dflash").chains(drafter, target, 4).draft(seq, starts, 0.0, None, None)
    streams, _ = target_pass(target, seq, drafter.cfg.capture_layers)
    for n, c in enumerate(starts):
        proposer = family_of("dflash").proposer(drafter)
        proposer.start(seq[0, : c + 2].tolist(), [s[:, : c + 1] for s in streams])
        assert proposer.propose(4, 0.0, None)[0] == drafts[n].tolist(), c


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
