"""Which of the target's `hidden_states` a drafter reads, by the rule its spec names (`fusion`): the
rule lives here, apart from every family's model, because the target_features job computes those
states once for all the drafters of a target that read the same ones.

- tri: EAGLE-3's low/mid/high = (2, N//2, N-3) for N >= 8 layers; for shallower targets
  (1, N//2, N-1) so the three streams stay distinct.
- last: the final hidden state, hidden_states[N] (EAGLE-1; an MTP head).
- spread<n>: DFlash's choice for a drafter of n layers: the outputs of n target layers spread
  evenly from layer 1 to layer N-3 (0-based), the middle layer's alone for n = 1. Layer i's output
  is hidden_states[i + 1].
"""

from __future__ import annotations


def spread_layer_ids(num_layers: int, n: int) -> tuple[int, ...]:
    """The 0-based target layers a DFlash drafter of n layers reads by default."""
    if n == 1:
        return (num_layers // 2,)
    lo, hi = 1, max(num_layers - 3, n)
    return tuple(sorted({round(lo + j * (hi - lo) / (n - 1)) for j in range(n)}))


def capture_layers(num_layers: int, fusion: str, chosen=None) -> tuple[int, ...]:
    """The `hidden_states[i]` indices read under rule `fusion`: `chosen` (the spec's own), checked
    against the target, or the rule's default."""
    if chosen:
        if max(chosen) > num_layers:
            raise ValueError(f"capture_layers {list(chosen)}: the target has hidden states 0..{num_layers}")
        return tuple(chosen)
    if fusion.startswith("spread"):
        return tuple(i + 1 for i in spread_layer_ids(num_layers, int(fusion.removeprefix("spread"))))
    if fusion == "last":
        return (num_layers,)
    if num_layers >= 8:
        return (2, num_layers // 2, num_layers - 3)
    return (1, num_layers // 2, num_layers - 1)
