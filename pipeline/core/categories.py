"""Curves and depth choices per prompt category (code, math, chat ...), from a prompts file's labels.

A measurement keeps, per prompt, its pooled chain counts and decode walks (pipeline/core/contracts.py
`Measured`), and the prompts file gives each prompt a category. A category's curve pools the rows
of its prompts exactly as the whole curve pools every row, so no extra target pass is needed, and
its depth is chosen by the same noise-aware rule with the same costs: few prompts in a category
give a wide interval, and the smaller depth wins within it.
"""

from __future__ import annotations

import dataclasses

from pipeline.core.acceptance import curve_from_prompt_rows, walk_accept_len
from pipeline.core.choice import choose_depth
from pipeline.core.contracts import CategoryChoice
from pipeline.core.types import Curve


@dataclasses.dataclass(frozen=True)
class CategoryRows:
    category: str
    curve: Curve
    per_prompt: tuple  # the category's rows of the whole curve's per_prompt
    walks: tuple  # and of its walks (empty when the curve has none)


def split_by_category(measured, index: int = 0) -> list[CategoryRows]:
    """Curve `index` of a Measured result, split by its prompts' categories (sorted by name);
    [] when the prompts carry no categories. A curve of fewer prompts (a diagnostic condition's,
    evaluation.diagnostic_prompts) ran the first of them."""
    if not measured.categories:
        return []
    part = measured.curves[index]
    base, rows, walks = part.curve, part.per_prompt, part.walks
    if len(measured.categories) < len(rows):
        raise ValueError(f"{len(measured.categories)} prompt categories for {len(rows)} measured prompts")
    categories = measured.categories[: len(rows)]
    out = []
    for category in sorted(set(categories)):
        mine = [i for i, c in enumerate(categories) if c == category]
        cat_rows = tuple(rows[i] for i in mine)
        cat_walks = tuple(walks[i] for i in mine) if walks else ()
        curve = curve_from_prompt_rows(
            cat_rows, condition=base.condition, temperature=base.temperature, category=category
        )
        if cat_walks:
            curve = dataclasses.replace(curve, decode_accept_len=tuple(walk_accept_len(cat_walks)))
        out.append(CategoryRows(category, curve, cat_rows, cat_walks))
    return out


def category_curves(measured) -> tuple[Curve, ...]:
    """Every curve of a measurement split by category, in curve order, categories sorted within."""
    return tuple(part.curve for i in range(len(measured.curves)) for part in split_by_category(measured, i))


def choose_by_category(measured, cost_ratio: float, *, pass_cost, seed: int) -> tuple[CategoryChoice, ...]:
    """The depth of each category of the primary curve, costed as the whole choice was."""
    return tuple(
        CategoryChoice(
            category=part.category,
            prompts=len(part.per_prompt),
            choice=choose_depth(
                part.curve,
                cost_ratio,
                pass_cost=pass_cost,
                per_prompt=part.per_prompt or None,
                walks=part.walks or None,
                seed=seed,
            ),
        )
        for part in split_by_category(measured, 0)
    )
