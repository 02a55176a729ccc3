"""The engine's whole iteration is timed as validation times it: on the prompts given, decoded as deep
as asked, every depth at least `repeats` times, the median seconds per target pass."""

import pytest
import torch

from workers.measure import cost, decode_timer


def test_engine_pass_ms_decodes_the_given_prompts_as_validation_does(monkeypatch):
    seen = {}

    def fake(decoders, prompts, device, *, new_tokens, repeats, warmup_prompts, temperature, seed):
        seen.update(n=len(decoders), prompts=prompts, new_tokens=new_tokens, repeats=repeats, warmup=warmup_prompts)
        assert temperature == 0.0
        return {"pass_s": [0.010 * (1 + k) for k in range(len(decoders))]}

    monkeypatch.setattr(decode_timer, "time_decoders", fake)
    prompts = [torch.tensor([1, 2, 3]), torch.tensor([4, 5])]
    ms = cost.engine_pass_ms(
        None, None, prompts, new_tokens=24, max_depth=3, warmup=5, repeats=7, device=torch.device("cpu")
    )
    assert ms == [10.0, 20.0, 30.0, 40.0]
    # 7 decodes per depth over 2 prompts: 4 passes over them; warm-up on at most every prompt
    assert seen == {"n": 4, "prompts": prompts, "new_tokens": 24, "repeats": 4, "warmup": 2}


def test_time_decoders_reports_the_median_seconds_per_pass(monkeypatch):
    def decoder(passes):
        def run(prompt, max_new, gen, timing):
            timing.update(decode_s=passes * 0.5, tokens=max_new - 1, passes=passes)
            return [0] * max_new

        return run

    timed = decode_timer.time_decoders(
        [decoder(4), decoder(2)],
        [torch.tensor([1])] * 3,
        torch.device("cpu"),
        new_tokens=9,
        repeats=1,
        warmup_prompts=0,
        temperature=0.0,
        seed=0,
    )
    assert timed["pass_s"] == [0.5, 0.5] and timed["accept_len"] == [2.0, 4.0]


def test_the_profile_times_the_engine_in_two_blocks_around_everything_else(monkeypatch):
    """Half the prompts first thing, the other half last: the blocks say how far the timing moved
    while the batch sizes were timed, and pass_ms is their mean."""
    calls = []

    def fake_engine(target, proposer, prompts, *, new_tokens, max_depth, warmup, repeats, device, trees=False):
        calls.append(("engine", [int(p[0]) for p in prompts], repeats, trees))
        scale = 1.0 if sum(c[0] == "engine" for c in calls) == 1 else 1.2
        return [10.0, 14.0 * scale, 18.0 * scale][: max_depth + 1]

    def fake_batch(target, drafter, family, b, context_len, max_depth, warmup, repeats, seed, device, tree_budget):
        calls.append(("batch", b))
        return {"draft_ms": 1.0, **{f"verify_{k}": 10.0 + k for k in range(max_depth + 1)}}

    monkeypatch.setattr(cost, "engine_pass_ms", fake_engine)
    monkeypatch.setattr(cost, "_profile_batch", fake_batch)
    family = type("Family", (), {"proposer": staticmethod(lambda drafter: "proposer"), "one_pass": False})()
    profile = cost.profile_cost(
        target=torch.nn.Linear(2, 2),
        drafter=None,
        family=family,
        context_len=8,
        max_depth=2,
        warmup=1,
        repeats=5,
        seed=0,
        prompts=[torch.tensor([i]) for i in range(5)],
        new_tokens=4,
        batch_sizes=(1, 4),
    )
    # 5 decodes per depth in all: 3 in each block; the blocks decode disjoint halves of the prompts
    assert calls == [("engine", [0, 2, 4], 3, False), ("batch", 1), ("batch", 4), ("engine", [1, 3], 3, False)]
    first, last = profile.pass_ms_blocks
    assert first == (10.0, 14.0, 18.0) and last == pytest.approx((10.0, 16.8, 21.6))
    assert profile.pass_ms == pytest.approx((10.0, 15.4, 19.8))
