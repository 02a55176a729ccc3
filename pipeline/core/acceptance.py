"""Pure maths of acceptance curves: from accepted drafts to cond_accept, survival, accept_len.

Acceptance is pooled over verification passes (emitted tokens over target passes), never a
mean of per-request means. Acceptance rule (Leviathan et al. 2023; Chen et al. 2023): a draft
x with draft probability q(x) and target probability p(x) is kept with probability
min(1, p(x)/q(x)); at temperature 0, while it equals the target's argmax. The expected
acceptance at one position is alpha = sum_x min(p(x), q(x)). No torch, Ray, MLflow or SQL
here: these functions are tested exactly against closed forms.

A decoder does not start a chain at every position, though. After a pass that kept n drafts
its next chain starts n + 1 positions later, so a hard stretch (one token per pass) weighs
more per pass than an easy one, and accept_len(k), pooled over positions, overstates what
decoding gets. `decode_walk` walks the measured chains as a decoder at depth k would;
`decode_accept_len(k)` is the tokens per target pass of that walk, and it is what the depth
choice maximises (pipeline/core/choice.py). At temperature 0 the walk is exactly what the
engine does: a test checks the engine's accepted counts, pass by pass, against it. In the
quickstart run of 2026-12-02 (experiments/results/quickstart/README.md) the post-norm
drafter's accept_len(6) is 2.281, its decode_accept_len(6) 1.944, and the engine kept 1.947
tokens per pass at k = 6 (the engine decodes the held-out validation prompts, the walk the
curve's prompts).
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.core.types import Curve


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


def curve_from_accepted(accepted: Sequence[int], max_depth: int, *, condition: str, temperature: float) -> Curve:
    """Pool greedy chains: `accepted[i]` is how many of chain i's drafts the target accepted.

    Pooled over verification steps: survival[j] is the share of all chains that kept j drafts.
    """
    n = len(accepted)
    if n == 0:
        raise ValueError("no chains were measured")
    if any(a < 0 or a > max_depth for a in accepted):
        raise ValueError(f"accepted counts must lie in 0..{max_depth}")
    survival = [sum(1 for a in accepted if a >= j) / n for j in range(1, max_depth + 1)]
    return _curve(survival, n, condition, temperature)


def curve_from_sampled(
    ratios: Sequence[Sequence[float]], alphas: Sequence[Sequence[float]], *, condition: str, temperature: float
) -> Curve:
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


def curve_from_prompt_rows(
    rows: Sequence[Sequence[float]], *, condition: str, temperature: float, category: str = ""
) -> Curve:
    """Pool per-prompt rows [chains, sum of survival[1], ..., sum of survival[K]] (what a measurement
    keeps per prompt) into one curve: the same pooled curve as measuring those prompts alone."""
    chains = sum(r[0] for r in rows)
    if not rows or chains <= 0:
        raise ValueError("no chains were measured")
    survival = [sum(r[j] for r in rows) / chains for j in range(1, len(rows[0]))]
    return _curve(survival, int(chains), condition, temperature, category)


def _curve(survival: list[float], n: int, condition: str, temperature: float, category: str = "") -> Curve:
    return Curve(
        condition=condition,
        temperature=float(temperature),
        num_chains=n,
        cond_accept=tuple(cond_from_survival(survival)),
        survival=tuple(survival),
        accept_len=tuple(accept_len_from_survival(survival)),
        category=category,
    )


def decode_walk(accepted: Sequence[int], depth: int) -> tuple[int, int]:
    """(tokens emitted, target passes) of decoding at `depth` over a run of chain starts.

    accepted[c]: drafts accepted by the chain starting at position c (of a deeper chain: capped
    here at depth). A decoder does not start a chain at every position: after a pass that
    accepted n drafts, the next chain starts n + 1 positions later. Hard stretches, where
    passes emit one token each, therefore weigh more per pass than in a mean over positions.
    """
    tokens = passes = c = 0
    while c < len(accepted):
        n = min(accepted[c], depth)
        tokens, passes, c = tokens + n + 1, passes + 1, c + n + 1
    return tokens, passes


def walk_accept_len(walks: Sequence[Sequence[Sequence[int]]]) -> list[float]:
    """Pooled tokens per target pass at every k; walks: per prompt, [tokens, passes] for k = 0..K."""
    depths = len(walks[0])
    return [sum(w[k][0] for w in walks) / sum(w[k][1] for w in walks) for k in range(depths)]
