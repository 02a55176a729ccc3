"""The engine's whole iteration is timed as validation times it: on the prompts given, decoded as deep
as asked, every depth at least `repeats` times, the median seconds per target pass."""

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
