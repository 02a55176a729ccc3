"""One learning-rate schedule (workers/runtime/lr_schedule.py) for targets and drafters, equal bit for bit to
the two closed forms the training loops used before it existed, so trained models are unchanged."""

from __future__ import annotations

import math

import pytest

from workers.runtime.lr_schedule import warmup_cosine_lr

BASES = (3e-3, 1e-4, 3.0e-3 * 0.7, 1.0, 0.1, 5e-4, 2.5e-3)
STEPS = (1, 2, 5, 9, 10, 11, 19, 20, 21, 40, 97, 300, 1000, 20000)


def old_target_lr(base, step, steps, warmup=20):
    """workers/models/target.py::_cosine_lr, as it was."""
    if step < warmup:
        return base * (step + 1) / warmup
    return base * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def old_drafter_lr(base, step, steps):
    """The inline schedule of workers/drafters/eagle3/train.py::train_drafter, as it was."""
    return base * (min(1.0, (step + 1) / 10) * 0.5 * (1 + math.cos(math.pi * step / steps)))


def target_lr(base, step, steps):
    return warmup_cosine_lr(base, step, steps, warmup=20, decay_during_warmup=False)


def drafter_lr(base, step, steps):
    return warmup_cosine_lr(base, step, steps, warmup=10, decay_during_warmup=True)


def _mismatches(new, old, base, steps):
    return [s for s in range(steps) if new(base, s, steps) != old(base, s, steps)]


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("steps", STEPS)
def test_target_schedule_is_the_old_one_exactly(base, steps):
    assert _mismatches(target_lr, old_target_lr, base, steps) == []


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("steps", STEPS)
def test_drafter_schedule_is_the_old_one_exactly(base, steps):
    assert _mismatches(drafter_lr, old_drafter_lr, base, steps) == []


def test_other_warmups_follow_the_same_closed_forms():
    for warmup in (1, 3, 7, 50):
        for steps in (1, warmup - 1, warmup, warmup + 1, 4 * warmup + 3):
            for step in range(max(steps, 0)):
                assert warmup_cosine_lr(3e-3, step, steps, warmup=warmup, decay_during_warmup=False) == old_target_lr(
                    3e-3, step, steps, warmup
                )
                assert warmup_cosine_lr(3e-3, step, steps, warmup=warmup, decay_during_warmup=True) == 3e-3 * (
                    min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * step / steps))
                )


def test_shapes():
    base, steps = 3e-3, 100
    t = [target_lr(base, s, steps) for s in range(steps)]
    d = [drafter_lr(base, s, steps) for s in range(steps)]
    assert t[0] == base / 20 and t[20] == base  # ramp from base/warmup; cosine starts at base
    assert all(a < b for a, b in zip(t[:20], t[1:20]))  # rising through the warm-up
    assert all(a > b for a, b in zip(t[20:], t[21:]))  # then falling to the end
    assert 0 < t[-1] < base * 0.01
    assert max(d) < base  # warm-up and decay overlap: the peak stays under base
    assert max(range(steps), key=d.__getitem__) == 9  # the peak is where the ramp ends
    assert all(a > b for a, b in zip(d[9:], d[10:]))


def _off_by_one_target(base, step, steps, warmup=20):
    if step < warmup:
        return base * step / warmup  # a warm-up that starts at 0
    return base * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def _reordered_target(base, step, steps, warmup=20):
    if step < warmup:
        return base * ((step + 1) / warmup)  # same maths, other rounding
    return base * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def _off_by_one_drafter(base, step, steps):
    return base * (min(1.0, step / 10) * 0.5 * (1 + math.cos(math.pi * step / steps)))


def _reordered_drafter(base, step, steps):
    return base * min(1.0, (step + 1) / 10) * 0.5 * (1 + math.cos(math.pi * step / steps))


def test_the_comparison_catches_bugs():
    """The exact comparisons above fail for an off-by-one warm-up, and even for a mere reordering
    of the same arithmetic (which changes rounding, and so the trained weights)."""
    assert _mismatches(_off_by_one_target, old_target_lr, 3e-3, 40)
    assert _mismatches(_off_by_one_drafter, old_drafter_lr, 3e-3, 40)
    assert any(_mismatches(_reordered_target, old_target_lr, b, 40) for b in BASES)
    assert any(_mismatches(_reordered_drafter, old_drafter_lr, b, s) for b in BASES for s in STEPS)
    # and a schedule with the other shape, or the other warm-up length, is not mistaken for one
    other_shape = lambda b, s, n: warmup_cosine_lr(b, s, n, warmup=20, decay_during_warmup=True)  # noqa: E731
    other_warmup = lambda b, s, n: warmup_cosine_lr(b, s, n, warmup=19, decay_during_warmup=False)  # noqa: E731
    assert _mismatches(other_shape, old_target_lr, 3e-3, 40)
    assert _mismatches(other_warmup, old_target_lr, 3e-3, 40)
