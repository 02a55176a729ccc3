"""How close the prediction came, per validated pairing at its chosen depth: the bias, whether the
prediction interval for the validation's own sample covered the measurement, and the factor
(tokens per pass, or pass cost) the bias comes from (pipeline/core/prediction_check.py); where a
draft tree is served, its own row beside the chain's (no interval: trees are chosen on rank paths)."""

from __future__ import annotations

from pipeline.autotune.choice_row import choice_row, tree_of
from pipeline.core.choice import leviathan_cost
from pipeline.core.prediction_check import PredictionCheck, point_check, prediction_checks
from pipeline.core.timing_noise import prediction_sigma
from pipeline.report.figures import LEVEL
from pipeline.report.plots import tree_label
from pipeline.report.tables import ReportTable

CLOSE = 0.05  # a prediction within 5% of the measurement counts as close


def pairing_checks(pairing) -> list[PredictionCheck]:
    """Every depth of a validated pairing ([] without a curve, a depth choice or a validation)."""
    if not (pairing.measured and pairing.selected and pairing.validated):
        return []
    selected, check = pairing.selected, pairing.validated.speedup_check
    primary = pairing.measured.primary
    depths = len(check.measured_speedup)
    cost = selected.pass_cost or leviathan_cost(selected.choice.cost_ratio, depths)
    return prediction_checks(
        primary.curve,
        walks=primary.walks,
        per_prompt=primary.per_prompt,
        pass_cost=cost,
        measured_speedup=check.measured_speedup,
        engine_accept_len=check.engine_accept_len,
        sample_prompts=pairing.held_out_prompts or 0,
        same_prompts=pairing.validated_on_curve,
        timing_sigma=prediction_sigma(pairing.profiled.cost.pass_ms_blocks) if pairing.profiled else 0.0,
        level=LEVEL,
        seed=pairing.jobs.get("select_depth", {}).get("seed", 0),
    )


def _factor(value: float) -> str:
    return f"{value - 1.0:+.1%}"


def prediction_table(pairings) -> ReportTable | None:
    """One row per validated pairing at its chosen depth (None when no pairing has one)."""
    rows = []
    for p in pairings:
        checks = pairing_checks(p)
        if not checks:
            continue
        check = p.validated.speedup_check
        c = checks[check.chosen_depth]
        if not p.held_out_prompts:
            sample = "the curve's prompts"
        elif p.validated_on_curve:
            sample = f"the curve's first {p.held_out_prompts} prompts"
        else:
            sample = f"{p.held_out_prompts} prompts"
        rows.append(
            (
                p.label,
                str(c.depth),
                f"{c.predicted:.3f} [{c.lo:.3f}, {c.hi:.3f}]",
                sample,
                f"{c.measured:.3f}",
                f"{c.bias:+.1%}",
                _factor(c.acceptance_factor),
                _factor(c.cost_factor),
                ("within 5%" if abs(c.bias) <= CLOSE else "off by more than 5%")
                + (", covered" if c.covered else ", outside the interval"),
            )
        )
        tree = check.tree
        if tree is not None and tree_of(choice_row(p.selected)) is not None:  # the tree is what is served
            t = point_check(
                0,
                tokens=tree.decode_accept_len[0],
                predicted=tree.predicted_speedup[0],
                engine_tokens=tree.engine_accept_len[0],
                measured=tree.measured_speedup[0],
            )
            close = "within 5%" if abs(t.bias) <= CLOSE else "off by more than 5%"
            rows.append(
                (
                    "",
                    f"tree of {tree_label(tree.trees[0])}",
                    f"{t.predicted:.3f}",
                    "",
                    f"{t.measured:.3f}",
                    f"{t.bias:+.1%}",
                    _factor(t.acceptance_factor),
                    _factor(t.cost_factor),
                    f"served; {close}",
                )
            )
    if not rows:
        return None
    return ReportTable(
        f"Prediction against measurement at the chosen depth (batch size 1, {LEVEL:.0%} prediction interval "
        "for the validation's sample of prompts)",
        (
            "pairing",
            "k",
            "predicted",
            "interval for",
            "measured",
            "bias",
            "from tokens per pass",
            "from pass cost",
            "",
        ),
        tuple(rows),
    )
