"""`specfleet report`: one self-contained HTML page per experiment (or per pair of experiments).

The page holds its figures inline (PNG as data URIs), so it can be mailed or opened from an MLflow
artifact view; the same figures are written beside it as PNG files, and every table also goes to
`tables.md` for READMEs. Everything is drawn from stored results (pipeline/report/data.py).
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core.choice import leviathan_cost
from pipeline.core.intervals import BatchSpeedup, speedup_bands
from pipeline.report import figures as fig
from pipeline.report import served as srv
from pipeline.report import tables as tab
from pipeline.report.plots import plot_tree_check, plot_trees
from pipeline.report.prediction_table import prediction_table
from pipeline.report.summary import pairing_summary

STYLE = """body{font-family:sans-serif;margin:2em auto;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}caption{text-align:left;font-weight:bold;padding:4px 0}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}td:first-child,th:first-child{text-align:left}
img{max-width:100%}figure{margin:1em 0}figcaption{font-size:13px;color:#555}
pre{white-space:pre-wrap;background:#f4f4f4;padding:4px 8px;font-size:12px}"""


def pairing_speedups(pairing) -> list[BatchSpeedup]:
    """Predicted speedup by depth per batch size with intervals, as the select job costed it ([]: the
    pairing has no depth choice)."""
    if not (pairing.measured and pairing.profiled and pairing.selected):
        return []
    selected, curve = pairing.selected, pairing.measured.primary.curve
    batch1 = selected.pass_cost or leviathan_cost(selected.choice.cost_ratio, curve.max_depth + 1)
    chosen = {**(selected.batch_depths or {}), 1: selected.choice.depth}
    # the select job's seed: the same resamples its choice saw
    return speedup_bands(
        curve,
        per_prompt=pairing.measured.primary.per_prompt,
        walks=pairing.measured.primary.walks,
        cost=pairing.profiled.cost,
        batch1_cost=batch1,
        chosen=chosen,
        seed=pairing.jobs["select_depth"]["seed"],
    )


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


@dataclass
class Page:
    """The page being written: HTML parts, the tables for tables.md, and the figure files."""

    folder: Path
    parts: list[str] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)

    def heading(self, text: str, level: int = 2) -> None:
        self.parts.append(f"<h{level}>{html.escape(text)}</h{level}>")
        self.tables.append("#" * (level + 1) + f" {text}")

    def text(self, text: str) -> None:
        self.parts.append(f"<p>{html.escape(text)}</p>")

    def block(self, part) -> None:
        """A part written both ways: its html() on the page, its markdown() in tables.md."""
        self.parts.append(part.html())
        self.tables.append(part.markdown())

    def table(self, table: tab.ReportTable) -> None:
        if table.rows:
            self.parts.append(table.html())
            self.tables.append(table.markdown())

    def figure(self, name: str, draw, caption: str) -> None:
        """`draw(path)` writes one PNG; the page embeds it, tables.md links it. Names that slug alike
        (`a_b/c`, `a/b_c`) get a number each, so no figure overwrites another."""
        stem, taken = slug(name), {p.name for p in self.figures}
        n = next(i for i in range(len(taken) + 2) if (f"{stem}_{i}.png" if i else f"{stem}.png") not in taken)
        path = draw(self.folder / (f"{stem}_{n}.png" if n else f"{stem}.png"))
        data = base64.b64encode(Path(path).read_bytes()).decode()
        self.parts.append(
            f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        )
        self.tables.append(f"![{caption}]({Path(path).name})")
        self.figures.append(Path(path))

    def write(self, title: str) -> Path:
        """The page and tables.md; the figures an earlier report wrote here and this one did not are
        removed (tables.md lists them), so the folder and its MLflow copy hold one report."""
        earlier = self.folder / "tables.md"
        if earlier.is_file():
            for name in re.findall(r"\]\(([^)/]+\.png)\)", earlier.read_text()):
                if name not in {p.name for p in self.figures}:
                    (self.folder / name).unlink(missing_ok=True)
        page = self.folder / "report.html"
        page.write_text(
            f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}'
            f"</title><style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
            + "\n".join(self.parts)
            + "</body></html>\n"
        )
        (self.folder / "tables.md").write_text(f"# {title}\n\n" + "\n\n".join(self.tables) + "\n")
        return page


def _job_counts(record) -> str:
    return ", ".join(f"{n} {s}" for s, n in record.job_counts.items() if n)


def _summary(page: Page, record) -> None:
    """The page's opening: per pairing, what to serve and how, the verdict and the gain."""
    page.heading("Summary")
    page.text(
        f"Experiment {record.ref}, created {record.created_at[:10]} ({_job_counts(record)} jobs). Speedups are "
        "over plain decoding; hashes, job ids and MLflow runs are in the appendix at the end."
    )
    for p in record.pairings:
        page.heading(p.label, 3)
        page.block(pairing_summary(p))


def _appendix(page: Page, records, *tables: tab.ReportTable) -> None:
    """Where the results came from: the experiments, then `tables` (jobs, runs and paths)."""
    page.heading("Appendix: provenance")
    for record in records:
        _provenance(page, record)
    for table in tables:
        page.table(table)


def _provenance(page: Page, record) -> None:
    counts = _job_counts(record)
    page.table(
        tab.ReportTable(
            f"Experiment {record.ref}",
            ("field", "value"),
            (
                ("experiment id", str(record.id)),
                ("spec hash", record.spec_hash),
                ("code version", record.code_version),
                ("created", record.created_at),
                ("MLflow run", record.mlflow_run_id or ""),
                ("jobs", counts),
                *(
                    (("results skipped (stored by another release)", ", ".join(record.skipped)),)
                    if record.skipped
                    else ()
                ),
            ),
        )
    )


def experiment_page(record, folder: Path) -> Page:
    """Every section of one experiment's report, figures written into `folder`."""
    page = Page(folder)
    _summary(page, record)
    measured = [p for p in record.pairings if p.measured]
    speedups = {p.label: pairing_speedups(p) for p in record.pairings}
    if record.tuned:
        page.heading("Tuned configs")
        page.table(tab.tuned_table(record, speedups))
    distilled = [p for p in record.pairings if p.distilled]
    if distilled:
        page.heading("Distillation stages")
        page.table(tab.distill_table(distilled))
    if measured:
        page.heading("Acceptance and survival by depth")
        page.table(tab.accept_len_table(measured))
        page.table(tab.cond_accept_table(measured))
        for p in measured:
            page.figure(
                f"{p.label}_acceptance",
                lambda path, p=p: fig.plot_acceptance(p, path),
                f"{p.label}: survival and accept_len by depth, every condition",
            )
    chosen = [p for p in record.pairings if speedups[p.label]]
    if chosen:
        page.heading("Predicted and measured speedup by depth")
        for p in chosen:
            check = p.validated.speedup_check if p.validated else None
            model = (
                "timed engine iterations"
                if p.selected.choice.cost_model == "timed"
                else f"k c + 1, c = {p.selected.choice.cost_ratio:.3g}"
            )
            page.figure(
                f"{p.label}_speedup",
                lambda path, p=p, c=check, m=model: fig.plot_speedup_by_batch(
                    f"{p.label}\n{p.selected.hardware}", speedups[p.label], c, path, batch1_model=m
                ),
                f"{p.label}: predicted speedup by depth per batch size, the chosen depth dotted",
            )
        validated = [p for p in record.pairings if p.validated]
        if validated:
            page.table(tab.speedup_check_table(validated))
            closeness = prediction_table(validated)
            if closeness:
                page.table(closeness)
        with_hf = [p for p in validated if p.validated.speedup_check.hf_runs]
        if with_hf:
            page.table(tab.hf_table(with_hf))
    _served(page, record, speedups)
    _drift_and_conditions(page, measured)
    _categories(page, [p for p in record.pairings if p.selected and p.selected.by_category and p.measured])
    _trees(page, record)
    if record.job_seconds:
        page.heading("Job times")
        page.table(tab.job_time_table(record))
    served = [p for p in record.pairings if p.served and p.served.serving_check]
    _appendix(page, [record], tab.tuned_provenance_table(record), srv.printed_config_table(served))
    return page


def _served(page: Page, record, speedups: dict) -> None:
    """The serving engine's checks: what it refused, and per depth and batch size what it measured."""
    served = [p for p in record.pairings if p.served]
    if not served:
        return
    page.heading("Served by the serving engine")
    for p in served:
        if p.served.serving_check is None:
            page.text(f"{p.label}: the engine cannot serve this drafter: {p.served.refused}")
            continue
        check = p.served.serving_check
        verdict = "passed" if check.passed else "failed: " + "; ".join(check.problems)
        page.text(f"{p.label} on {check.hardware}: {verdict}. The config it printed is in the appendix.")
        for note in check.notes:
            page.text(f"{p.label}: {note}")
    checked = [p for p in served if p.served.serving_check is not None]
    if checked:
        page.table(srv.served_speedup_table(checked, speedups))
        page.table(srv.served_acceptance_table([p for p in checked if p.measured]))
        page.table(srv.cost_source_table(checked))
        for p in checked:
            page.figure(
                f"{p.label}_served",
                lambda path, p=p: srv.plot_served(p, speedups.get(p.label, []), path),
                f"{p.label}: the serving engine's speedup and acceptance per position against specfleet's",
            )


def _trees(page: Page, record) -> None:
    trees = [p for p in record.pairings if p.selected and p.selected.tree and p.selected.tree.tree]
    if trees:
        page.heading("Draft trees")
        page.text(
            "Pairings whose best tree drafts nothing (plain decoding wins) are left out. A tree is served only where "
            "it is predicted to beat the chain at every batch size; elsewhere the chain is served and the tree below "
            "is analysis only."
        )
        page.table(tab.tree_table(trees))
        for p in trees:
            tree_check = p.validated.speedup_check.tree if p.validated else None
            page.figure(
                f"{p.label}_trees",
                lambda path, p=p: plot_trees(p.selected.tree, path, p.label),
                f"{p.label}: the best tree of every size",
            )
            if tree_check is not None:
                page.figure(
                    f"{p.label}_tree_check",
                    lambda path, p=p, t=tree_check: plot_tree_check(t, path, p.label),
                    f"{p.label}: trees through the engine",
                )


def _drift_and_conditions(page: Page, measured) -> None:
    if not measured:
        return
    primary = measured[0].measured.primary.curve
    with_drift = [p for p in measured if any(d.depth > 0 for d in p.measured.diagnostics)]
    if with_drift:
        page.heading("Drift diagnostics by depth")
        for target in dict.fromkeys(p.target for p in with_drift):
            group = [p for p in with_drift if p.target == target]
            page.figure(
                f"{target}_drift",
                lambda path, g=group, title=target: fig.plot_drift_across(
                    g, condition=primary.condition, temperature=primary.temperature, path=path, title=title
                ),
                f"{target}: drift diagnostics by depth across drafters",
            )
        for table in tab.drift_tables(with_drift, condition=primary.condition, temperature=primary.temperature):
            page.table(table)
    temperatures = sorted({c.temperature for p in measured for c in (m.curve for m in p.measured.curves)})
    if any(len({c.condition for c in (m.curve for m in p.measured.curves)}) > 1 for p in measured):
        page.heading("Acceptance by condition")
        for t in temperatures:
            page.table(tab.condition_table(measured, temperature=t))
            page.figure(
                f"conditions_T{t:g}",
                lambda path, t=t: fig.plot_condition_bars(
                    measured, temperature=t, path=path, title="accept_len by condition"
                ),
                f"accept_len at the deepest depth by condition, T={t:g}",
            )


def _categories(page: Page, pairings) -> None:
    """With a categorised prompts file: the depth per category, and each category's curve."""
    if not pairings:
        return
    from pipeline.core.categories import category_curves
    from pipeline.report.plots import plot_comparison

    page.heading("Prompt categories")
    page.table(tab.category_table(pairings))
    for p in pairings:
        primary = p.measured.primary.curve
        curves = {
            "all prompts": primary,
            **{
                c.category: c
                for c in category_curves(p.measured)
                if (c.condition, c.temperature) == (primary.condition, primary.temperature)
            },
        }
        page.figure(
            f"{p.label}_categories",
            lambda path, p=p, c=curves: plot_comparison(c, path, p.label),
            f"{p.label}: survival and accept_len per prompt category",
        )


def comparison_page(a, b, folder: Path) -> Page:
    """Two experiments side by side: the pairings both measured, then those only one did."""
    page = Page(folder)
    mine, theirs = {p.label: p for p in a.pairings if p.measured}, {p.label: p for p in b.pairings if p.measured}
    common = [
        (label, (mine[label], pairing_speedups(mine[label])), (theirs[label], pairing_speedups(theirs[label])))
        for label in mine
        if label in theirs
    ]
    page.heading(f"{a.ref} against {b.ref}")
    page.table(
        tab.ReportTable(
            "The pairings both measured: the primary curve and the chosen depth at batch size 1",
            ("pairing", a.ref, b.ref),
            tuple((label, _side(*x), _side(*y)) for label, x, y in common),
        )
    )
    for label, x, y in common:
        page.figure(
            f"{label}_compare",
            lambda path, label=label, x=x, y=y: fig.plot_compare(a.ref, x, b.ref, y, path, label),
            f"{label}: {a.ref} against {b.ref}",
        )
    only = [f"{label} ({a.ref} only)" for label in mine if label not in theirs] + [
        f"{label} ({b.ref} only)" for label in theirs if label not in mine
    ]
    if only:
        page.text("Measured by one experiment only: " + ", ".join(only))
    _appendix(page, [a, b])
    return page


def _side(pairing, speedups: list[BatchSpeedup]) -> str:
    curve = pairing.measured.primary.curve
    text = f"accept_len({curve.max_depth}) {curve.accept_len[-1]:.3f}"
    if speedups:
        s = speedups[0]
        text += f"; k = {s.chosen}, predicted {s.speedup.value[s.chosen]:.3f}x"
    if pairing.validated:
        check = pairing.validated.speedup_check
        text += f", measured {check.measured_speedup[check.chosen_depth]:.3f}x"
    return text
