"""Attention-drift diagnostics per depth k, from the same drafter passes that draft the chains.

rms[k]          RMS of the state handed to step k+1 (||h|| / sqrt(d)).
sink_attn[k]    head-averaged attention mass on the sink key (position 0: BOS when present).
recent_attn[k]  mass on the most recent key (the query's own position: at k >= 2 a drafted token).
attn_entropy[k] head-averaged entropy of the attention distribution (nats).
Per curve (depth 0): RMS of each captured target stream (rms_low/rms_mid/rms_high or rms_last)
and of the fused drafter input (rms_fused).
"""
from __future__ import annotations

import torch

from pipeline.core.types import DRIFT_NAMES


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x.float().pow(2).mean(-1).sqrt()


def stream_names(n: int) -> tuple[str, ...]:
    if n == 3:
        return ("rms_low", "rms_mid", "rms_high")
    if n == 1:
        return ("rms_last",)
    return tuple(f"rms_stream{i}" for i in range(n))


class DriftStats:
    """Sums over chains, turned into means by `rows()`."""

    def __init__(self, depth: int):
        self.depth = depth
        self.sums = {name: [0.0] * depth for name in DRIFT_NAMES}
        self.flat: dict[str, float] = {}
        self.chains = 0

    @torch.no_grad()
    def add(self, outs, streams, g0: torch.Tensor, starts: list[int]) -> None:
        """outs: StepOuts over one sequence ([1, T, ...]) whose attention was kept at the chain rows
        (forward_steps(rows=starts)); starts: chain start positions."""
        T = outs[0].logits.shape[1]
        c = torch.tensor(starts, device=outs[0].logits.device)
        for s, out in enumerate(outs[: self.depth]):
            i = c + s  # step s of the chain that started at c sits at position c + s
            rows = out.probs[0].float()  # [H, n, T + s]: the rows of the chains' step s
            own = rows[:, torch.arange(len(starts)), i] if s == 0 else rows[..., T + s - 1]  # [H, n]
            entropy = -torch.special.xlogy(rows, rows).sum(-1)  # [H, n]
            self.sums["rms"][s] += _rms(out.chain[0, i]).sum().item()
            self.sums["sink_attn"][s] += rows[..., 0].mean(0).sum().item()
            self.sums["recent_attn"][s] += own.mean(0).sum().item()
            self.sums["attn_entropy"][s] += entropy.mean(0).sum().item()
        for name, stream in zip(stream_names(len(streams)), streams):
            self.flat[name] = self.flat.get(name, 0.0) + _rms(stream[0, c]).sum().item()
        self.flat["rms_fused"] = self.flat.get("rms_fused", 0.0) + _rms(g0[0, c]).sum().item()
        self.chains += len(starts)

    def rows(self) -> list[tuple[int, str, float]]:
        """(depth, name, mean) for every diagnostic."""
        n = max(self.chains, 1)
        out = [(k + 1, name, self.sums[name][k] / n) for name in DRIFT_NAMES for k in range(self.depth)]
        out += [(0, name, total / n) for name, total in sorted(self.flat.items())]
        return out
