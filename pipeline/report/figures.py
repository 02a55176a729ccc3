"""The figures of `specfleet report`: each draws stored results (pipeline/report/data.py) into one PNG.

Intervals are the 90% bootstrap intervals over prompts (pipeline/core/intervals.py), shaded or as
error bars. The per-job figures of a run (pipeline/report/plots.py) stay as they are; these compare
conditions, batch sizes, drafters and experiments.
"""

from __future__ import annotations

import functools
from pathlib import Path

from pipeline.core.intervals import BatchSpeedup, curve_bands
from pipeline.report.findings import ordered_conditions
from pipeline.report.plots import integer_depths, pyplot, save_figure

LEVEL = 0.9


@functools.lru_cache(maxsize=512)
def bands_of(curve, per_prompt) -> tuple:
    """(survival, accept_len) bands of a stored curve (hashable: its per-prompt rows are tuples), drawn
    once per report: its figures and tables read the same curves."""
    return curve_bands(curve, per_prompt, level=LEVEL)


# the drift diagnostics a report compares across drafters (draft_attn is the complement of the other two)
REPORT_DRIFT = ("rms", "sink_attn", "recent_attn", "attn_entropy")


def _label(curve) -> str:
    return f"{curve.condition}" + (f" [{curve.category}]" if curve.category else "")


def plot_acceptance(pairing, path: str | Path) -> Path:
    """Survival and accept_len by depth for every condition of one pairing, one row per temperature."""
    plt = pyplot()
    measured = pairing.measured
    temperatures = sorted({c.temperature for c in (m.curve for m in measured.curves)})
    colour = {
        label: f"C{i % 10}"
        for i, label in enumerate(dict.fromkeys(_label(c) for c in (m.curve for m in measured.curves)))
    }
    fig, axes = plt.subplots(len(temperatures), 2, figsize=(10, 3.4 * len(temperatures)), squeeze=False)
    for row, temperature in zip(axes, temperatures):
        for curve, per_prompt in ((m.curve, m.per_prompt) for m in measured.curves):
            if curve.temperature != temperature:
                continue
            survival, accept_len = bands_of(curve, per_prompt)
            depths, c = range(1, curve.max_depth + 1), colour[_label(curve)]
            row[0].plot(depths, survival.value, "o-", ms=3, color=c, label=_label(curve))
            row[0].fill_between(depths, survival.lo, survival.hi, color=c, alpha=0.15)
            row[1].plot(range(curve.max_depth + 1), accept_len.value, "o-", ms=3, color=c)
            row[1].fill_between(range(curve.max_depth + 1), accept_len.lo, accept_len.hi, color=c, alpha=0.15)
        row[0].set(
            xlabel="depth j", ylabel="survival[j]", ylim=(0, 1.02), title=f"P(>= j drafts accepted), T={temperature:g}"
        )
        row[1].set(xlabel="depth k", ylabel="accept_len(k)", title=f"tokens per target pass, T={temperature:g}")
        row[0].legend(fontsize=7)
    integer_depths(axes.flat)
    return save_figure(fig, path, f"{pairing.label}: acceptance by condition ({LEVEL:.0%} intervals over prompts)")


def _spread(items: list, most: int) -> list:
    """At most `most` items, the first and the last among them, evenly spaced."""
    if len(items) <= most:
        return items
    picks = sorted({round(i * (len(items) - 1) / (most - 1)) for i in range(most)})
    return [items[i] for i in picks]


def plot_speedup_by_batch(
    title: str, by_batch: list[BatchSpeedup], check, path: str | Path, batch1_model: str = ""
) -> Path:
    """Predicted speedup by depth with its interval and the chosen depth, per batch size (up to four);
    at batch size 1 the engine's measured speedup when the depth was validated (`check`), and how a
    pass was costed there (`batch1_model`; larger batch sizes are costed by their timed passes)."""
    plt = pyplot()
    shown = _spread(by_batch, 4)
    fig, axes = plt.subplots(1, len(shown), figsize=(4.2 * len(shown), 3.6), squeeze=False)
    for ax, b in zip(axes[0], shown):
        depths = range(len(b.speedup.value))
        ax.plot(depths, b.speedup.value, "o-", ms=3, label="predicted")
        ax.fill_between(depths, b.speedup.lo, b.speedup.hi, alpha=0.2, label=f"{LEVEL:.0%} interval")
        if b.batch_size == 1 and check is not None:
            ax.plot(
                range(len(check.measured_speedup)),
                check.measured_speedup,
                "s--",
                ms=4,
                color="C2",
                label="measured (engine)",
            )
        ax.axvline(b.chosen, color="C3", ls=":", label=f"chosen k = {b.chosen}")
        ax.axhline(1.0, color="grey", lw=0.8)
        note = f"\n({batch1_model})" if b.batch_size == 1 and batch1_model else "\n(timed passes)"
        ax.set(xlabel="depth k", ylabel="speedup over k = 0", title=f"batch size {b.batch_size}{note}")
        ax.legend(fontsize=7)
    integer_depths(axes[0])
    return save_figure(fig, path, title)


def plot_drift_across(pairings, *, condition: str, temperature: float, path: str | Path, title: str) -> Path:
    """The drift diagnostics by depth, one line per pairing, under one condition and temperature."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(REPORT_DRIFT), figsize=(3.6 * len(REPORT_DRIFT), 3.5))
    for ax, name in zip(axes, REPORT_DRIFT):
        for i, p in enumerate(pairings):
            points = sorted(
                (d.depth, d.value)
                for d in p.measured.diagnostics
                if d.name == name and d.condition == condition and d.temperature == temperature and d.depth > 0
            )
            if points:
                ax.plot(*zip(*points), "o-", ms=3, color=f"C{i % 10}", label=p.label)
        ax.set(xlabel="depth k", title=name)
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(fontsize=7)
    integer_depths(axes)
    return save_figure(fig, path, f"{title} ({condition}, T={temperature:g})")


def plot_condition_bars(pairings, *, temperature: float, path: str | Path, title: str) -> Path:
    """accept_len at each pairing's deepest measured depth, one bar per condition, with intervals."""
    plt = pyplot()
    conditions = ordered_conditions(
        [
            {"condition": c.condition}
            for p in pairings
            for c in (m.curve for m in p.measured.curves)
            if c.temperature == temperature and not c.category
        ]
    )
    fig, ax = plt.subplots(figsize=(min(12.0, max(6.0, 0.35 * len(pairings) * max(1, len(conditions)))), 4))
    width = 0.8 / max(1, len(conditions))
    for j, condition in enumerate(conditions):
        xs, ys, errs = [], [], [[], []]
        for i, p in enumerate(pairings):
            for curve, per_prompt in ((m.curve, m.per_prompt) for m in p.measured.curves):
                if curve.temperature == temperature and curve.condition == condition and not curve.category:
                    accept_len = bands_of(curve, per_prompt)[1]
                    xs.append(i + (j - (len(conditions) - 1) / 2) * width)
                    ys.append(accept_len.value[-1])
                    errs[0].append(accept_len.value[-1] - accept_len.lo[-1])
                    errs[1].append(accept_len.hi[-1] - accept_len.value[-1])
        ax.bar(xs, ys, width, yerr=errs, capsize=2, color=f"C{j % 10}", label=condition)
    ax.set_xticks(range(len(pairings)), [p.label for p in pairings], rotation=20, ha="right", fontsize=8)
    ax.set(ylabel="accept_len at the deepest depth", title=f"T={temperature:g}, {LEVEL:.0%} intervals over prompts")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.35)  # room above the bars for the legend
    ax.legend(fontsize=7, ncol=4, loc="upper center")
    return save_figure(fig, path, title)


def plot_compare(label_a: str, a, label_b: str, b, path: str | Path, title: str) -> Path:
    """One pairing in two experiments: accept_len of the primary curve with intervals, and the
    predicted speedup at batch size 1 (`a`, `b`: (PairingResults, [BatchSpeedup]) each)."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.5, 3.6))
    for i, (label, (pairing, by_batch)) in enumerate(((label_a, a), (label_b, b))):
        curve, per_prompt = pairing.measured.primary.curve, pairing.measured.primary.per_prompt
        accept_len = bands_of(curve, per_prompt)[1]
        depths = range(curve.max_depth + 1)
        ax1.plot(depths, accept_len.value, "o-", ms=3, color=f"C{i}", label=label)
        ax1.fill_between(depths, accept_len.lo, accept_len.hi, color=f"C{i}", alpha=0.15)
        if by_batch:
            s = by_batch[0]
            ax2.plot(range(len(s.speedup.value)), s.speedup.value, "o-", ms=3, color=f"C{i}", label=label)
            ax2.fill_between(range(len(s.speedup.value)), s.speedup.lo, s.speedup.hi, color=f"C{i}", alpha=0.15)
            ax2.axvline(s.chosen, color=f"C{i}", ls=":")
    ax1.set(xlabel="depth k", ylabel="accept_len(k)", title="the primary curve of each")
    ax2.set(xlabel="depth k", ylabel="predicted speedup", title="batch size 1 (dotted: chosen k)")
    ax1.legend(fontsize=8)
    integer_depths((ax1, ax2))
    return save_figure(fig, path, title)
