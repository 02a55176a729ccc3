"""The learning-rate schedule of every training loop: a linear warm-up and a cosine decay to 0.

Torch-free, so that it can be tested (and hashed into code versions) on its own.
"""

from __future__ import annotations

import math


def warmup_cosine_lr(base: float, step: int, steps: int, *, warmup: int, decay_during_warmup: bool) -> float:
    """The learning rate of 0-based `step` out of `steps`, for peak rate `base`.

    Two shapes, each kept to the exact float arithmetic of the loop it came from (trained models
    depend on every bit of it):

    decay_during_warmup=False (targets, workers/models/target.py; warmup=20): warm-up, then decay.
        The first `warmup` steps ramp linearly, base*1/warmup, base*2/warmup, ..., base; after
        that a half cosine runs over the *remaining* steps, from base at step == warmup towards 0
        at the last step: base * 0.5 * (1 + cos(pi * (step - warmup) / max(1, steps - warmup))).
        The ramp ends at base (step warmup - 1) and the cosine starts there (step warmup).

    decay_during_warmup=True (drafters, workers/drafters/training.py; warmup=10): warm-up times decay.
        A half cosine over the *whole* run, 0.5 * (1 + cos(pi * step / steps)), is multiplied by
        the ramp min(1, (step + 1) / warmup); the ramp and the decay overlap, so the peak is a bit
        under base and the rate at step `warmup` is already decaying.

    With steps <= warmup the first shape is only the linear ramp (which never gets to base when
    steps < warmup); the second is still the ramp times the whole-run cosine.
    """
    if decay_during_warmup:
        return base * (min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * step / steps)))
    if step < warmup:
        return base * (step + 1) / warmup
    return base * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))
