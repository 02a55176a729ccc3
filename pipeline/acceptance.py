"""Pure math of acceptance curves, speedup and depth choice (REFERENCE.md section 2).

No torch, Ray, MLflow or SQL here: these functions are tested exactly against closed forms.
"""
from __future__ import annotations

from collections.abc import Sequence

from pipeline.types import Curve, DepthChoice


def survival_from_cond(cond_accept: Sequence[float]) -> list[float]:
    """survival[j] = prod_{i<=j} cond_accept[i]."""
    out, prod = [], 1.0
    for a in cond_accept:
        prod *= a
        out.append(prod)
    return out


def cond_from_survival(survival: Sequence[float]) -> list[float]:
    """cond_accept[j] = survival[j] / survival[j-1] (0 once nothing survives)."""
    out, prev = [], 1.0
    for s in survival:
        out.append(s / prev if prev > 0 else 0.0)
        prev = s
    return out


def accept_len_from_survival(survival: Sequence[float]) -> list[float]:
    """accept_len(k) = 1 + sum_{j<=k} survival[j], for k = 0..len(survival) (bonus token included)."""
    out, total = [1.0], 1.0
    for s in survival:
        total += s
        out.append(total)
    return out


def closed_form_accept_len(alpha: float, k: int) -> float:
    """Constant-alpha closed form (1 - alpha^(k+1)) / (1 - alpha); the test oracle."""
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def leviathan_speedup(alpha: float, k: int, cost_ratio: float) -> float:
    """Leviathan et al. Thm 3.8: (1 - alpha^(k+1)) / ((1 - alpha)(k c + 1))."""
    return closed_form_accept_len(alpha, k) / (k * cost_ratio + 1.0)


def curve_speedup(accept_len: Sequence[float], cost_ratio: float) -> list[float]:
    """Speedup at every k from a measured curve: accept_len(k) / (k c + 1).

    Same cost model as Leviathan's theorem (verifying k+1 tokens costs one decode step), with
    the measured accept_len in place of the constant-alpha geometric sum.
    """
    return [a / (k * cost_ratio + 1.0) for k, a in enumerate(accept_len)]


def curve_from_accepted(accepted: Sequence[int], max_depth: int, *, condition: str, temperature: float) -> Curve:
    """Pool greedy chains: `accepted[i]` is how many of chain i's drafts the target accepted.

    Pooled over verification steps (REFERENCE.md: sum of emitted tokens / target passes).
    """
    n = len(accepted)
    if n == 0:
        raise ValueError("no chains were measured")
    if any(a < 0 or a > max_depth for a in accepted):
        raise ValueError(f"accepted counts must lie in 0..{max_depth}")
    survival = [sum(1 for a in accepted if a >= j) / n for j in range(1, max_depth + 1)]
    return _curve(survival, n, condition, temperature)


def curve_from_sampled(ratios: Sequence[Sequence[float]], alphas: Sequence[Sequence[float]], *,
                       condition: str, temperature: float) -> Curve:
    """Pool sampled chains, drafts drawn from the drafter's q along each path.

    ratios[i][l] = min(1, p(x_l) / q(x_l)) at the drafted token x_l: the chance draft l is accepted.
    alphas[i][l] = sum_x min(p(x), q(x)): its expected value over the draw at that position.
    P(drafts 1..j accepted | path) = prod_{l<=j} ratios[l]; replacing the last factor by its
    expectation alphas[j] keeps the estimate unbiased and lowers its variance:
    survival[j] = mean_i prod_{l<j} ratios[i][l] * alphas[i][j].
    """
    n = len(alphas)
    if n == 0 or len(ratios) != n:
        raise ValueError("need one row of ratios and alphas per chain")
    depth = len(alphas[0])
    sums = [0.0] * depth
    for r_row, a_row in zip(ratios, alphas):
        prefix = 1.0
        for j in range(depth):
            sums[j] += prefix * a_row[j]
            prefix *= r_row[j]
    return _curve([s / n for s in sums], n, condition, temperature)


def _curve(survival: list[float], n: int, condition: str, temperature: float) -> Curve:
    return Curve(
        condition=condition,
        temperature=float(temperature),
        num_chains=n,
        cond_accept=tuple(cond_from_survival(survival)),
        survival=tuple(survival),
        accept_len=tuple(accept_len_from_survival(survival)),
    )


def choose_depth(curve: Curve, cost_ratio: float) -> DepthChoice:
    """The k in 0..max_depth with the highest predicted speedup (the smaller k on a tie)."""
    if cost_ratio <= 0:
        raise ValueError(f"cost_ratio must be > 0, got {cost_ratio}")
    speedups = curve_speedup(curve.accept_len, cost_ratio)
    best = max(range(len(speedups)), key=lambda k: (speedups[k], -k))
    return DepthChoice(
        depth=best,
        accept_len=curve.accept_len[best],
        speedup=speedups[best],
        cost_ratio=cost_ratio,
        speedups=tuple(speedups),
    )
