"""An MTP head is measured like every chain drafter (curves with drift diagnostics, costs) and refused
in one line where it would be served: no stock engine loads an MTP head for a Llama-family target."""

from __future__ import annotations

import pytest
import torch

from pipeline.autotune.engines import registry as engines
from pipeline.core.settings import Evaluation
from workers.drafters.registry import family_of
from workers.measure.curves import measure_curves

EVAL = Evaluation(
    max_depth=3,
    temperatures=[0.0],
    num_prompts=3,
    prompt_len=20,
    continuation_len=6,
    corpus="stdlib",
    conditions=["default"],
    long_context_len=64,
)


def test_an_mtp_heads_curve_carries_the_drift_diagnostics(tiny_target, tiny_mtp_heads):
    target, tokenizer, _ = tiny_target
    head, _ = tiny_mtp_heads["recursive-pre"]
    ((curve, diagnostics, *_),) = measure_curves(
        target=target, drafter=head, family=family_of("mtp"), tokenizer=tokenizer, evaluation=EVAL, seed=0
    )
    assert curve.num_chains == EVAL.num_prompts * EVAL.continuation_len
    assert all(a >= b for a, b in zip(curve.survival, curve.survival[1:])) and curve.survival[0] > 0
    names = {(k, name) for k, name, _ in diagnostics}
    for k in range(1, EVAL.max_depth + 1):
        assert {(k, "rms"), (k, "sink_attn"), (k, "recent_attn")} <= names
    assert (0, "rms_last") in names  # the one stream an MTP head reads: the target's last hidden state


def test_the_cost_profile_times_an_mtp_head(tiny_target, tiny_mtp_heads):
    from workers.measure.cost import profile_cost

    target, tokenizer, _ = tiny_target
    head, _ = tiny_mtp_heads["vanilla-pre"]
    prompts = [torch.tensor(tokenizer("def f(x):\n    return x + 1\n")["input_ids"]) for _ in range(2)]
    cost = profile_cost(
        target=target,
        drafter=head,
        family=family_of("mtp"),
        context_len=32,
        max_depth=3,
        warmup=1,
        repeats=2,
        seed=0,
        prompts=prompts,
        new_tokens=4,
        batch_sizes=(1, 2),
        tree_budget=2,
    )
    assert cost.draft_ms > 0 and len(cost.pass_ms) == 4 and all(ms > 0 for ms in cost.pass_ms)


def test_export_and_every_engine_refuse_an_mtp_head_in_one_line(tmp_path):
    family = family_of("mtp")
    assert family.method == "mtp"
    with pytest.raises(ValueError, match="no stock engine serves an MTP head") as info:
        family.export(tmp_path / "checkpoint", tmp_path / "out")
    assert "\n" not in str(info.value) and not (tmp_path / "out").exists()
    for engine in engines.ENGINES:
        with pytest.raises(engines.EngineVersionError, match="no stock engine serves an MTP head") as info:
            engines.emit(engine, [(1, 1, 2)], model="m", method="mtp")
        assert info.value.option == "--method"
