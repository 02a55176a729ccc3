"""Real vLLM, in its own environment, serves a DFlash block drafter trained and exported by specfleet
(vLLM's `DFlashDraftModel` layout) on the tiny target, with the config `autotune --engine vllm`
prints: greedy output identical to plain decoding, the depth the schedule names at each batch size,
and, drafting whole trained blocks as specfleet's own engine does, the same drafts accepted as
specfleet's engine accepts on the same prompts.

Skipped, with the reason, where no vLLM environment exists (`make vllm` builds one; CI does).
"""

from __future__ import annotations

import pytest
import torch
from conftest import build_tiny_dflash, build_tiny_target
from support.vllm import vllm_python

from pipeline.autotune.engines.registry import emit
from workers.decoding.chain import generate
from workers.drafters.dflash.export import export_dflash
from workers.drafters.dflash.proposer import BlockProposer
from workers.serving.vllm_engine import serve, speculative_config

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.long]
PROMPTS = [[1, *range(20 + 7 * i, 60 + 7 * i)] for i in range(4)]  # BOS, then 40 tokens each
NEW = 24
BLOCK = 5  # the drafter drafts up to 4 tokens a block
SCHEDULE = [(1, 1, 3), (2, 8, 1)]


@pytest.fixture(scope="module")
def pairing(tmp_path_factory):
    """The tiny target with two heads (vLLM's CPU attention has no kernel for head size 16) as a
    model folder, and a trained DFlash drafter exported by specfleet."""
    tiny = build_tiny_target(heads=2)
    target, tokenizer, _ = tiny
    drafter, _ = build_tiny_dflash(tiny, block_size=BLOCK)
    root = tmp_path_factory.mktemp("dflash")
    target.save_pretrained(root / "target", safe_serialization=True)
    tokenizer.save_pretrained(root / "target")
    export_dflash(drafter, root / "drafter", dtype=torch.float32)
    return target.eval(), drafter.eval(), root / "target", root / "drafter"


def _serve(pairing, schedule):
    _, _, target, drafter = pairing
    config = None
    if schedule:
        out = emit("vllm", schedule, model=str(drafter), method="dflash", version="0.32.0")
        config = speculative_config(out.text)
        assert config["num_speculative_tokens"] == BLOCK - 1  # whole blocks, the ranges set the depth
        assert not any("drafts a block of" in n for n in out.notes)
    return serve(
        vllm_python(),
        model=str(target),
        dtype="float32",
        speculative_config=config,
        prompts=PROMPTS,
        max_tokens=NEW,
        batch_sizes=[1, 4],
        max_model_len=256,
        cpu_threads=2,
    )


@pytest.fixture(scope="module")
def plain(pairing):
    return _serve(pairing, None)


def test_vllm_serves_the_dflash_schedule_with_plain_greedy_output(pairing, plain):
    served = _serve(pairing, SCHEDULE)
    for ours, theirs in zip(served["batches"], plain["batches"]):
        assert ours["outputs"] == theirs["outputs"]
    one, four = served["batches"]
    assert one["draft_tokens"] == 3 * one["drafts"] > 0  # depth 3 alone
    assert four["draft_tokens"] < 1.5 * four["drafts"] and four["drafts"] > 0  # depth 1 from two requests on


def test_vllm_accepts_what_specfleets_engine_accepts_on_the_same_prompts(pairing):
    target, drafter, _, _ = pairing
    depth = 3
    theirs = _serve(pairing, [(1, 8, depth)])["batches"][0]
    accepted = []
    with torch.no_grad():
        for prompt in PROMPTS:
            _, per_pass = generate(
                target, BlockProposer(drafter), torch.tensor([prompt]), max_new=NEW, depth=depth, temperature=0.0
            )
            accepted += per_pass
    ours = 1 + sum(accepted) / len(accepted)
    vllm = 1 + theirs["accepted"] / theirs["drafts"]
    print(
        f"mean accepted length at depth {depth}: specfleet {ours:.4f} over {len(accepted)} passes, "
        f"vLLM {vllm:.4f} over {theirs['drafts']} drafts"
    )
    assert vllm == pytest.approx(ours, abs=0.05)
