"""Attention-drift findings from the database: drafters compared per depth and per condition.

Reads what measure jobs stored (curves and diagnostics) for one experiment and lays it out the
way the attention-drift paper does: rms / sink_attn / recent_attn by depth, accept_len by
prompt format, cond_accept by depth. Tables print in the terminal or as Markdown for reports.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from pipeline.core.settings import PROMPT_CONDITIONS


def ordered_conditions(rows) -> list[str]:
    """Conditions in the spec's canonical order: prompt formats first (the baseline leading), then noise."""
    names = {r["condition"] for r in rows}
    return sorted(names, key=lambda c: (PROMPT_CONDITIONS.index(c) if c in PROMPT_CONDITIONS else 99, c))


def experiment_rows(store, experiment: str | None):
    """(curve rows, diagnostic rows) of the newest experiment with that name (or the newest one)."""
    exps = [e for e in store.experiments() if experiment is None or e["name"] == experiment]
    if not exps:
        return [], []
    newest = max(exps, key=lambda e: (e["created_at"], e["id"]))
    hashes = {j["job_hash"] for j in store.jobs(newest["id"])}
    curves = [r for r in store.curves() if r["job_hash"] in hashes]
    diags = [r for r in store.diagnostics() if r["job_hash"] in hashes]
    return curves, diags


def diagnostic_by_depth(diags, *, name: str, condition: str, temperature: float) -> dict[str, dict[int, float]]:
    """pairing label -> depth -> value of one drift diagnostic under one condition (depths >= 1)."""
    rows = [r for r in diags if r["name"] == name and r["depth"] > 0]
    return _by_depth(rows, "value", condition, temperature)


def curve_by_depth(curves, *, column: str, condition: str, temperature: float) -> dict[str, dict[int, float]]:
    """pairing label -> depth -> one curve column (cond_accept, survival, accept_len, decode_accept_len)."""
    return _by_depth(curves, column, condition, temperature)


def _by_depth(rows, column: str, condition: str, temperature: float) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = defaultdict(dict)
    for r in rows:
        if r["condition"] == condition and r["temperature"] == temperature and r[column] is not None:
            out[f"{r['target']}/{r['drafter']}"][r["depth"]] = r[column]
    return dict(out)


def accept_len_by_condition(curves, *, temperature: float, depth: int) -> dict[str, dict[str, float]]:
    """pairing label -> condition -> accept_len(depth)."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for r in curves:
        if r["temperature"] == temperature and r["depth"] == depth:
            out[f"{r['target']}/{r['drafter']}"][r["condition"]] = r["accept_len"]
    return dict(out)


def markdown_depth_table(values: dict[str, dict[int, float]], title: str) -> str:
    depths = sorted({d for v in values.values() for d in v})
    head = f"| {title} | " + " | ".join(f"k={d}" for d in depths) + " |"
    sep = "|---|" + "---|" * len(depths)
    lines = [head, sep]
    for label in sorted(values):
        cells = " | ".join(f"{values[label].get(d, float('nan')):.3f}" for d in depths)
        lines.append(f"| {label} | {cells} |")
    return "\n".join(lines)


def markdown_condition_table(values: dict[str, dict[str, float]], conditions: list[str], base: str) -> str:
    head = "| pairing | " + " | ".join(conditions) + " |"
    lines = [head, "|---|" + "---|" * len(conditions)]
    for label in sorted(values):
        lines.append(f"| {label} | " + " | ".join(condition_cells(values[label], conditions, base)) + " |")
    return "\n".join(lines)


def condition_cells(row: dict[str, float], conditions: list[str], base: str) -> list[str]:
    """One pairing's value per condition, each with its change against `base` ("" where not measured)."""
    cells = []
    for c in conditions:
        v = row.get(c)
        if v is None:
            cells.append("")
        elif c == base or not row.get(base):
            cells.append(f"{v:.3f}")
        else:
            cells.append(f"{v:.3f} ({(v - row[base]) / row[base] * 100:+.0f}%)")
    return cells


def plot_findings(curves, diags, *, condition: str, temperature: float, path: str | Path, title: str) -> Path:
    from pipeline.report.plots import pyplot, save_figure

    plt = pyplot()
    where = {"condition": condition, "temperature": temperature}
    panels = [
        (name, diagnostic_by_depth(diags, name=name, **where))
        for name in ("rms", "sink_attn", "recent_attn", "draft_attn")
    ]
    panels.append(("cond_accept", curve_by_depth(curves, column="cond_accept", **where)))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.7 * len(panels), 3.6))
    for ax, (name, values) in zip(axes, panels):
        for label, points in sorted(values.items()):
            depths = sorted(points)
            ax.plot(depths, [points[d] for d in depths], "o-", ms=3, label=label.split("/", 1)[1])
        ax.set(xlabel="depth k", title=f"{name} ({condition}, T={temperature:g})")
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(fontsize=7)
    return save_figure(fig, path, title)
