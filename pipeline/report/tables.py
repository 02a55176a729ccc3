"""The tables of `specfleet report`, each built once and written both as HTML and as Markdown.

A table is a title, a header and rows of already formatted cells; the builders below read stored
results (pipeline/report/data.py) and the intervals of pipeline/core/intervals.py.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from pipeline.autotune.choice_row import extrapolated, tree_of
from pipeline.core.intervals import BatchSpeedup
from pipeline.report.figures import LEVEL, REPORT_DRIFT, bands_of
from pipeline.report.findings import condition_cells, ordered_conditions
from pipeline.report.plots import depth_marks, hf_predicted, tree_label


@dataclass(frozen=True)
class ReportTable:
    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def markdown(self) -> str:
        def row(cells) -> str:
            return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

        return "\n".join(
            [f"**{self.title}**", "", row(self.header), "|" + "---|" * len(self.header), *(row(r) for r in self.rows)]
        )

    def html(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in self.rows)
        return (
            f"<table><caption>{html.escape(self.title)}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>"
        )


def ci_cell(value: float, lo: float, hi: float) -> str:
    """A value with its interval, or the value alone where the interval is a point."""
    return f"{value:.3f} [{lo:.3f}, {hi:.3f}]" if (lo, hi) != (value, value) else f"{value:.3f}"


def tuned_table(record, speedups: dict[str, list[BatchSpeedup]]) -> ReportTable:
    """The tuned-config versions this experiment wrote, with the decision's numbers and provenance."""
    by_pairing = {p.label: p for p in record.pairings}
    rows = []
    for r in record.tuned:
        label = f"{r['target']}/{r['drafter']}"
        pairing, batches = by_pairing.get(label), speedups.get(label) or []
        predicted = batches[0].speedup if batches else None
        check = pairing.validated.speedup_check if pairing and pairing.validated else None
        k = r["depth"]
        schedule = ", ".join(f"{lo}-{hi}: k={d}" for lo, hi, d in r["schedule"]) if r["schedule"] else ""
        if extrapolated(r):
            schedule += f" (measured to {r['schedule_measured_to']})"
        rows.append(
            (
                label,
                r["hardware"],
                r.get("timed_by") or "",
                r["condition"],
                f"{r['temperature']:g}",
                str(k),
                schedule,
                ci_cell(predicted.value[k], predicted.lo[k], predicted.hi[k]) if predicted else f"{r['speedup']:.3f}",
                f"{check.measured_speedup[k]:.3f}" if check and k < len(check.measured_speedup) else "",
                tree_label(tree_of(r)) if tree_of(r) else "",
                f"v{r['version']}" + ("" if r["active"] else " (replaced)"),
                r["source"],
            )
        )
    return ReportTable(
        f"Tuned configs written by this experiment (speedup at batch size 1, {LEVEL:.0%} interval over prompts)",
        (
            "pairing",
            "hardware",
            "costs timed by",
            "condition",
            "T",
            "depth",
            "depth per batch size",
            "predicted speedup",
            "measured speedup",
            "tree served",
            "version",
            "source",
        ),
        tuple(rows),
    )


def tuned_provenance_table(record) -> ReportTable:
    """The select job, MLflow run and code version behind each tuned-config version (the appendix)."""
    return ReportTable(
        "Tuned configs: the select job, its MLflow run and the code that wrote each version",
        ("pairing", "version", "select job", "MLflow run", "code"),
        tuple(
            (
                f"{r['target']}/{r['drafter']}",
                f"v{r['version']}",
                r["job_hash"] or "",
                r["mlflow_run_id"] or "",
                r["code_version"],
            )
            for r in record.tuned
        ),
    )


def accept_len_table(pairings) -> ReportTable:
    """accept_len(k) of each pairing's primary curve with its interval, k = 1..K."""
    depth = max((p.measured.primary.curve.max_depth for p in pairings), default=0)
    rows = []
    for p in pairings:
        curve = p.measured.primary.curve
        band = bands_of(curve, p.measured.primary.per_prompt)[1]
        rows.append(
            (
                p.label,
                f"{curve.condition}, T={curve.temperature:g}",
                *(
                    ci_cell(band.value[k], band.lo[k], band.hi[k]) if k <= curve.max_depth else ""
                    for k in range(1, depth + 1)
                ),
            )
        )
    return ReportTable(
        f"accept_len(k) of the primary curve ({LEVEL:.0%} interval over prompts)",
        ("pairing", "curve", *(f"k={k}" for k in range(1, depth + 1))),
        tuple(rows),
    )


def cond_accept_table(pairings) -> ReportTable:
    """cond_accept[j] of each pairing's primary curve: where acceptance falls off with depth."""
    depth = max((p.measured.primary.curve.max_depth for p in pairings), default=0)
    rows = tuple(
        (
            p.label,
            f"{c.condition}, T={c.temperature:g}",
            *(f"{c.cond_accept[j - 1]:.3f}" if j <= c.max_depth else "" for j in range(1, depth + 1)),
        )
        for p in pairings
        for c in (m.curve for m in p.measured.curves[:1])
    )
    return ReportTable(
        "cond_accept[j] of the primary curve: P(draft j accepted | drafts 1..j-1 were)",
        ("pairing", "curve", *(f"j={j}" for j in range(1, depth + 1))),
        rows,
    )


def drift_tables(pairings, *, condition: str, temperature: float) -> list[ReportTable]:
    """One table per drift diagnostic: its value by depth for every pairing that measured it."""
    out = []
    for name in REPORT_DRIFT:
        values = {
            p.label: {
                d.depth: d.value
                for d in p.measured.diagnostics
                if d.name == name and d.depth > 0 and d.condition == condition and d.temperature == temperature
            }
            for p in pairings
        }
        values = {k: v for k, v in values.items() if v}
        depths = sorted({d for v in values.values() for d in v})
        if values:
            out.append(
                ReportTable(
                    f"{name} by depth ({condition}, T={temperature:g})",
                    ("pairing", *(f"k={d}" for d in depths)),
                    tuple((label, *(f"{v[d]:.3f}" if d in v else "" for d in depths)) for label, v in values.items()),
                )
            )
    return out


def condition_table(pairings, *, temperature: float) -> ReportTable:
    """accept_len at each pairing's deepest depth per condition, and its change against the first."""
    curves = [
        c
        for p in pairings
        for c in (m.curve for m in p.measured.curves)
        if c.temperature == temperature and not c.category
    ]
    conditions = ordered_conditions([{"condition": c.condition} for c in curves])
    rows = []
    for p in pairings:
        values = {
            c.condition: c.accept_len[-1]
            for c in (m.curve for m in p.measured.curves)
            if c.temperature == temperature and not c.category
        }
        rows.append((p.label, *condition_cells(values, conditions, conditions[0])))
    return ReportTable(
        f"accept_len at the deepest depth by condition, T={temperature:g} (change against {conditions[0]})",
        ("pairing", *conditions),
        tuple(rows),
    )


def speedup_check_table(pairings) -> ReportTable:
    """Predicted against measured speedup by depth, where the engine validated the choice."""
    rows = []
    for p in pairings:
        check = p.validated.speedup_check
        for k, (pred, meas) in enumerate(zip(check.predicted_speedup, check.measured_speedup)):
            rows.append(
                (
                    p.label if k == 0 else "",
                    str(k),
                    f"{pred:.3f}",
                    f"{meas:.3f}",
                    f"{check.tokens_per_s[k]:.1f}",
                    f"{check.engine_accept_len[k]:.3f}",
                    depth_marks(check, k),
                )
            )
        rows.append(
            (
                "",
                "",
                "",
                "",
                "",
                "",
                f"passed, chosen reaches {check.chosen_vs_best:.1%} of the best"
                if check.passed
                else "failed: " + "; ".join(check.problems),
            )
        )
    return ReportTable(
        "Predicted against measured speedup (the real engine, batch size 1)",
        ("pairing", "k", "predicted", "measured", "tokens/s", "engine accept_len", ""),
        tuple(rows),
    )


def category_table(pairings) -> ReportTable:
    """The depth each prompt category would get on its own (a categorised prompts file), beside the
    depth over every prompt: the best point estimate before the noise rule, and the decoder's tokens
    per pass at the deepest depth (where categories differ most)."""
    from pipeline.core.categories import category_curves

    def cells(choice, curve) -> tuple[str, ...]:
        best = choice.best_point if choice.best_point is not None else choice.depth
        tokens = curve.decode_accept_len or curve.accept_len
        return (
            str(choice.depth),
            f"{choice.speedup:.3f}",
            f"k={best}: {choice.speedups[best]:.3f}",
            f"{tokens[-1]:.3f}",
        )

    rows, depth = [], 0
    for p in pairings:
        primary = p.measured.primary.curve
        depth = primary.max_depth
        by_name = {
            c.category: c
            for c in category_curves(p.measured)
            if (c.condition, c.temperature) == (primary.condition, primary.temperature)
        }
        rows.append((p.label, "all prompts", "", *cells(p.selected.choice, primary)))
        rows += [
            ("", c.category, str(c.prompts), *cells(c.choice, by_name[c.category])) for c in p.selected.by_category
        ]
    return ReportTable(
        "Depth per prompt category (batch size 1)",
        (
            "pairing",
            "category",
            "prompts",
            "depth",
            "predicted speedup",
            "best point estimate",
            f"tokens per pass at k={depth}",
        ),
        tuple(rows),
    )


def hf_table(pairings) -> ReportTable:
    """Hugging Face `generate` timed on the same held-out prompts as the engine (validation.compare_hf):
    plain, and assisted by a standalone drafter at every depth and with HF's defaults."""
    rows = []
    for p in pairings:
        check = p.validated.speedup_check
        plain = check.hf_runs[0].tokens_per_s
        k = check.chosen_depth
        rows.append(
            (
                p.label,
                f"specfleet engine, chosen k = {k}",
                f"{check.tokens_per_s[k]:.1f}",
                f"{check.tokens_per_s[k] / plain:.3f}",
                f"{check.predicted_speedup[k]:.3f}",
                "",
            )
        )
        for run in check.hf_runs:
            at = hf_predicted(check, run)
            rows.append(
                (
                    "",
                    f"HF {run.name}",
                    f"{run.tokens_per_s:.1f}",
                    f"{run.speedup:.3f}",
                    f"{at:.3f}" if at is not None else "",
                    str(run.mismatches),
                )
            )
    return ReportTable(
        "Hugging Face generate on the same prompts (an engine specfleet did not write)",
        ("pairing", "engine", "tokens/s", "over HF generate", "specfleet predicted", "greedy diffs"),
        tuple(rows),
    )


def tree_table(pairings) -> ReportTable:
    """The chosen draft tree per pairing, its expected tokens per pass, its gain over the chain, and
    which of the two is served."""
    rows = []
    for p in pairings:
        tree = p.selected.tree
        check = p.validated.speedup_check.tree if p.validated else None
        rows.append(
            (
                p.label,
                "the tree" if tree.served else f"the chain (k={tree.chain_depth})",
                tree_label(tree.tree),
                f"{tree.decode_accept_len:.3f}",
                f"{check.engine_accept_len[0]:.3f}" if check else "",
                f"k={tree.chain_depth}",
                f"{tree.over_chain:.3f}",
                f"{check.over_chain:.3f}" if check else "",
            )
        )
    return ReportTable(
        "Draft trees (batch size 1)",
        (
            "pairing",
            "served",
            "tree",
            "expected tokens/pass",
            "engine tokens/pass",
            "chain",
            "predicted over chain",
            "measured over chain",
        ),
        tuple(rows),
    )


def distill_table(pairings) -> ReportTable:
    """Each distilled drafter's stage and its rollouts' tokens per target pass, round by round: how the
    drafter decoded at the start of each round, before that round's updates (imitation has none)."""
    rounds = max((p.distill or {}).get("rounds", 0) for p in pairings)
    rows = []
    for p in pairings:
        stage, metrics = p.distill or {}, p.distilled.metrics
        per_round = [metrics.get(f"rollout_tokens_per_pass_round{r}") for r in range(rounds)]
        rows.append(
            (
                p.label,
                str(stage.get("method", "?")),
                str(stage.get("seed", 0)),
                str(metrics.get("distill_steps", "?")),
                *("-" if v is None else f"{v:.3f}" for v in per_round),
                f"{metrics['distill_loss']:.4f}" if "distill_loss" in metrics else "-",
            )
        )
    return ReportTable(
        "Distillation stages: the rollouts' tokens per target pass at the start of each round",
        ("pairing", "method", "seed", "steps", *(f"round {r}" for r in range(rounds)), "last loss"),
        tuple(rows),
    )


def job_time_table(record) -> ReportTable:
    """What the experiment's finished jobs took, by kind, in the order the kinds first finished (a job
    reused from an earlier run counts with the time it took then)."""
    rows = tuple(
        (kind, str(len(t)), f"{sum(t):.1f}", f"{sum(t) / len(t):.1f}", f"{max(t):.1f}")
        for kind, t in record.job_seconds.items()
    )
    total = [s for t in record.job_seconds.values() for s in t]
    if total:
        rows += (("all", str(len(total)), f"{sum(total):.1f}", f"{sum(total) / len(total):.1f}", f"{max(total):.1f}"),)
    return ReportTable(
        "Time per job kind (seconds each job took where it ran)",
        ("kind", "jobs", "total (s)", "mean (s)", "longest (s)"),
        rows,
    )
