"""The serving engine's verdict on a choice, from answers shaped as the engine side writes them
(workers/serving/vllm_side.py), and the config row a choice becomes: no engine needed."""

from __future__ import annotations

import pytest

from db.rows import tuned_config
from pipeline.autotune.choice_row import choice_row
from pipeline.core import contracts as c
from pipeline.core import tree_contracts as tc
from pipeline.core.choice import choose_depth
from pipeline.core.serving_verdict import depth_at, predictor, served_points, serving_verdict, share_interval
from pipeline.core.types import CostProfile, Curve

CURVE = Curve(
    condition="default",
    temperature=0.0,
    num_chains=40,
    cond_accept=(0.8, 0.6, 0.5),
    survival=(0.8, 0.48, 0.24),
    accept_len=(1.0, 1.8, 2.28, 2.52),
)
COST = CostProfile(
    hardware="cpu 2t x1 float32",
    draft_ms=1.0,
    decode_ms=10.0,
    verify_ms=12.0,
    batch_sizes=(1, 4),
    draft_ms_by_batch=(1.0, 2.0),
    verify_ms_by_batch=((10.0, 11.0, 12.0, 13.0), (20.0, 30.0, 40.0, 50.0)),
)
OUTPUTS = {1: [[5, 6, 7, 8]], 4: [[5, 6, 7, 8], [1, 2, 3, 4], [9, 9, 9, 9], [4, 3, 2, 1]]}


def _selected(schedule=((1, 1, 2), (2, 256, 1))) -> c.Selected:
    return c.Selected(
        choice=choose_depth(CURVE, 0.1),
        hardware="cpu 2t x1 float32",
        condition="default",
        temperature=0.0,
        batch_depths={1: 2, 4: 1},
        schedule=schedule,
    )


def _batch(size: int, seconds: float, k: float, *, drafts=10, accepted=(7, 4), outputs=None) -> dict:
    return {
        "batch_size": size,
        "seconds": seconds,
        "tokens": 4 * size,
        "outputs": outputs or OUTPUTS[size],
        "drafts": drafts if k else 0,
        "draft_tokens": round(k * drafts) if k else 0,
        "accepted": sum(accepted[: int(k)]) if k else 0,
        "accepted_per_pos": list(accepted[: int(k)]) if k else [],
    }


def _answer(*batches) -> dict:
    return {"start_s": 25.0, "batches": list(batches)}


PLAIN = _answer(_batch(1, 1.0, 0), _batch(4, 2.0, 0))


def _points(answer, schedule, selected=None):
    selected = selected or _selected()
    return served_points(answer, PLAIN, schedule=schedule, predict=predictor(selected, CURVE, COST), curve=CURVE)


def _sweep(seconds_by_k: dict[int, tuple[float, float]]):
    sweep = list(_points(PLAIN, [(1, 1, 0)]))
    for k, (s1, s4) in seconds_by_k.items():
        sweep += _points(_answer(_batch(1, s1, k), _batch(4, s4, k)), [(1, 1, k)])
    return sweep


def test_points_carry_the_engines_counters_against_its_own_plain_run():
    (one, four) = _points(_answer(_batch(1, 0.5, 2), _batch(4, 1.6, 1.2)), [(1, 1, 2), (2, 256, 1)])
    assert (one.depth, one.batch_size, one.tokens_per_s, one.measured_speedup) == (2, 1, 8.0, 2.0)
    assert one.accept_len == pytest.approx(1 + 11 / 10) and one.accepted_per_pos == (0.7, 0.4)
    assert (one.depth_run, one.greedy_equal, one.curve_accept_len) == (2.0, True, 2.28)
    assert one.predicted_speedup == _selected().choice.speedups[2]  # batch size 1: the choice's own model
    # batch size 4: the batch-size model, accept_len(1) x decode(4) / (draft(4) + verify(4, 2 tokens))
    assert (four.depth, four.depth_run) == (1, 1.2)
    assert four.predicted_speedup == pytest.approx(1.8 * 20.0 / (2.0 + 30.0))
    assert four.measured_speedup == pytest.approx((16 / 1.6) / (16 / 2.0))
    (plain_one, _) = _points(PLAIN, [(1, 1, 0)])
    assert (plain_one.accept_len, plain_one.depth_run, plain_one.accepted_per_pos) == (1.0, 0.0, ())


def test_a_printed_config_that_serves_as_chosen_passes():
    sweep = _sweep({1: (0.8, 1.5), 2: (0.6, 1.8), 3: (0.7, 2.2)})
    chosen = _points(_answer(_batch(1, 0.6, 2), _batch(4, 1.5, 1.1)), [(1, 1, 2), (2, 256, 1)])
    check = serving_verdict(
        engine="vllm 0.32.0",
        speculative_config="--speculative-config '{}'",
        schedule=[(1, 1, 2), (2, 256, 1)],
        sweep=sweep,
        chosen=chosen,
        selected=_selected(),
        hardware="cpu 2t x1 float32",
        tolerance=0.05,
        notes=("a note from the emitter",),
    )
    assert check.passed and check.problems == ()
    assert check.best_depth == {1: 2, 4: 1} and check.chosen_vs_best == {1: 1.0, 4: 1.0}
    assert check.notes[0] == "a note from the emitter"
    # batch size 1 ran k=2 as the sweep's k=2 did: one config in two engine starts, pooled
    assert check.notes[1].startswith("batch size 1: the printed config ran k=2, as the sweep's k=2 did: 6.7 and 6.7")
    assert "mean accepted length 2.100 against specfleet's 2.280 (-7.9%)" in check.notes[2]
    assert check.chosen_vs_best_interval == {1: (1.0, 1.0), 4: (1.0, 1.0)}  # no repeats recorded: the point itself
    assert len(check.sweep) == 8 and [p.batch_size for p in check.chosen] == [1, 4]


@pytest.mark.parametrize(
    "chosen_batches,sweep_seconds,hardware,problem",
    [
        # the engine ignored the schedule at batch size 4 and drafted 2 a step
        (((1, 0.6, 2, {}), (4, 1.5, 1.9, {})), None, None, "batch size 4: the engine drafted 1.9 tokens a step"),
        # at batch size 1 it drafted 3 where the config says 2
        (((1, 0.6, 3, {}), (4, 1.5, 1.0, {})), None, None, "batch size 1: the engine drafted 3 tokens a step"),
        # a depth the sweep shows far faster
        (((1, 0.6, 2, {}), (4, 1.5, 1.0, {})), {1: (0.3, 1.5)}, None, "batch size 1: the printed config (k=2) reaches"),
        # a wrong token
        (((1, 0.6, 2, {"outputs": [[5, 6, 7, 9]]}), (4, 1.5, 1.0, {})), None, None, "output differs from the engine's"),
        (((1, 0.6, 2, {}), (4, 1.5, 1.0, {})), None, "NVIDIA H100 x1 bfloat16", "costs were timed on cpu 2t"),
    ],
)
def test_each_failure_is_named(chosen_batches, sweep_seconds, hardware, problem):
    seconds = {1: (0.8, 1.5), 2: (0.6, 1.8), 3: (0.7, 2.2)} | (sweep_seconds or {})
    chosen = _points(_answer(*(_batch(b, s, k, **more) for b, s, k, more in chosen_batches)), [(1, 1, 2), (2, 256, 1)])
    check = serving_verdict(
        engine="vllm 0.32.0",
        speculative_config="x",
        schedule=[(1, 1, 2), (2, 256, 1)],
        sweep=_sweep(seconds),
        chosen=chosen,
        selected=_selected(),
        hardware=hardware or "cpu 2t x1 float32",
        tolerance=0.05,
    )
    assert not check.passed and len(check.problems) == 1 and check.problems[0].startswith(problem), check.problems


def test_depth_at_reads_a_schedule_as_vllm_does():
    schedule = [(1, 1, 3), (2, 8, 1)]
    assert [depth_at(schedule, b) for b in (1, 2, 8, 64)] == [3, 1, 1, 1]  # past the last range: its depth


def test_the_choice_row_is_what_the_store_keeps_for_autotune():
    candidates = (
        tc.TreeCandidate(tree=(), decode_accept_len=1.0, speedups=(1.0,)),
        tc.TreeCandidate(tree=((0,), (1,), (0, 0)), decode_accept_len=2.1, speedups=(1.4,)),
    )
    tree = tc.TreeChoice(
        tree=candidates[1].tree,
        decode_accept_len=2.1,
        speedup=1.4,
        best_point=1,
        chain_depth=2,
        chain_decode_accept_len=2.0,
        chain_speedup=1.3,
        candidates=candidates,
        batch_budgets={1: 1},
        chain_speedups=(1.3,),
    )
    for selected in (_selected(), _selected(schedule=None), _selected().model_copy(update={"tree": tree})):
        stored = tuned_config(
            "t",
            "d",
            selected,
            experiment_id=1,
            spec_hash="s",
            code_version="v",
            mlflow_run_id="r",
            curve_job_hash=None,
            cost_job_hash=None,
            drafter_job_hash=None,
        )
        row = choice_row(selected)
        assert {key: stored.get(key) for key in row} == row  # the store reads a missing tree back as None


def _timed(depth: int, per_group: float, *, start: float = 1.0, spread: float = 0.0, seed: int = 0) -> c.ServedPoint:
    """A batch-size-1 point of 8 one-prompt groups decoded 3 times within one engine start: group g
    takes per_group x (1 + g / 4) seconds (prompts differ), scaled by the start's own speed and
    jittered by `spread` from repeat to repeat."""
    import random

    rng = random.Random(seed)
    rows = tuple(
        tuple(start * per_group * (1 + g / 4) * (1 + spread * rng.uniform(-1, 1)) for g in range(8)) for _ in range(3)
    )
    seconds = sum(map(sum, rows))
    return c.ServedPoint(
        depth=depth,
        batch_size=1,
        tokens_per_s=96 / seconds,
        measured_speedup=1.0,
        predicted_speedup=1.0,
        accept_len=1.0,
        curve_accept_len=1.0,
        accepted_per_pos=(),
        depth_run=float(depth),
        greedy_equal=True,
        seconds=seconds,
        tokens=96,
        group_seconds=rows,
    )


def _judged(printed: c.ServedPoint, sweep: list[c.ServedPoint]) -> c.ServingCheck:
    return serving_verdict(
        engine="vllm 0.32.0",
        speculative_config="x",
        schedule=[(1, 256, printed.depth)],
        sweep=sweep,
        chosen=[printed],
        selected=_selected(),
        hardware="cpu 2t x1 float32",
        tolerance=0.05,
    )


def test_the_interval_pairs_the_prompts_of_every_config():
    """Prompts differ threefold in time, every config alike: pairing them leaves only the repeats'
    jitter in the interval (resampling each config's prompts on its own would not)."""
    sweep = [_timed(0, 1.0, seed=1, spread=0.01), _timed(1, 0.8, seed=2, spread=0.01)]
    printed = _timed(2, 0.9, seed=3, spread=0.01)
    lo, hi = share_interval([printed], [[p] for p in sweep])
    share = printed.tokens_per_s / sweep[1].tokens_per_s
    assert lo <= share <= hi and hi - lo < 0.02 and share == pytest.approx(0.8 / 0.9, rel=0.01)


def test_a_miss_within_the_engines_run_to_run_noise_is_noted_not_failed():
    """The printed k=2 is the sweep's k=2 in a slower engine start (as on SmolLM2: 25.3 and 20.9
    tokens/s for one config): pooled, it reaches under 95% of k=1, but the two starts disagree by
    more than that, so the verdict does not call it a miss."""
    sweep = [_timed(0, 1.0, seed=1), _timed(1, 0.60, seed=2, spread=0.02), _timed(2, 0.61, seed=3, spread=0.02)]
    check = _judged(_timed(2, 0.61, start=1.22, spread=0.02, seed=4), sweep)
    lo, hi = check.chosen_vs_best_interval[1]
    assert check.passed, check.problems
    assert check.chosen_vs_best[1] < 0.95 <= hi and lo < 0.85
    assert any("run-to-run noise" in n for n in check.notes)
    (pooled,) = [n for n in check.notes if "two engine starts" in n]
    gap = float(pooled.split("(")[1].split("%")[0])  # the printed start against the sweep's
    assert -20 < gap < -16 and pooled.startswith("batch size 1: the printed config ran k=2, as the sweep's k=2 did")


def test_a_miss_both_engine_starts_agree_on_fails():
    sweep = [_timed(0, 1.0, seed=1), _timed(1, 0.60, seed=2, spread=0.02), _timed(2, 0.75, seed=3, spread=0.02)]
    check = _judged(_timed(2, 0.75, spread=0.02, seed=4), sweep)
    lo, hi = check.chosen_vs_best_interval[1]
    assert not check.passed and hi < 0.95 and lo <= check.chosen_vs_best[1] <= hi
    assert check.problems[0].startswith("batch size 1: the printed config (k=2) reaches 80.")
