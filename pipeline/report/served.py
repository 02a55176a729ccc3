"""The serving engine's checks in `specfleet report`: per pairing and depth, specfleet's predicted
speedup (with its interval), specfleet's own engine and the serving engine side by side; the
engine's acceptance per position against specfleet's survival curve (with its interval); the
printed config at every batch size and its share of the engine's fastest depth.

The serving engine counts, per draft position i, the drafts whose i-th token it accepted; under
chain verification that token is accepted only after all before it, so the share is survival[i] of
specfleet's curve, measured on other prompts (the speedup check's held-out prompts).
"""

from __future__ import annotations

from pathlib import Path

from pipeline.core.engine_costs import cost_comparison
from pipeline.report.figures import LEVEL, bands_of
from pipeline.report.plots import integer_depths, pyplot, save_figure
from pipeline.report.serving_table import share_text
from pipeline.report.tables import ReportTable, ci_cell


def _cell(band, k: int) -> str:
    """A band's value at index k with its interval ("" where there is none)."""
    if band is None or k >= len(band.value):
        return ""
    return ci_cell(band.value[k], band.lo[k], band.hi[k])


def _predicted(speedups, batch_size: int, k: int) -> str:
    return _cell(next((b.speedup for b in speedups if b.batch_size == batch_size), None), k)


def served_speedup_table(pairings, speedups: dict) -> ReportTable:
    """Every depth the engine served, per batch size: specfleet's prediction (interval over prompts),
    specfleet's engine (its speedup check, batch size 1), and the serving engine's own clock and
    counters; then the printed config and its share of the engine's fastest depth."""
    rows = []
    for p in pairings:
        check = p.served.serving_check
        ours = p.validated.speedup_check if p.validated else None
        accept = bands_of(p.measured.primary.curve, p.measured.primary.per_prompt)[1] if p.measured else None
        for b in sorted({s.batch_size for s in check.sweep}):
            for s in (s for s in check.sweep if s.batch_size == b):
                k = s.depth
                rows.append(
                    (
                        p.label,
                        str(b),
                        str(k),
                        _predicted(speedups.get(p.label, []), b, k),
                        f"{ours.measured_speedup[k]:.3f}" if ours and b == 1 and k < len(ours.measured_speedup) else "",
                        f"{s.measured_speedup:.3f}" + (" (fastest)" if k == check.best_depth.get(b) else ""),
                        f"{s.tokens_per_s:.1f}",
                        f"{s.accept_len:.3f}",
                        _cell(accept, k),
                        f"{s.depth_run:.2f}",
                        "yes" if s.greedy_equal else "NO",
                    )
                )
            for s in (s for s in check.chosen if s.batch_size == b):
                share = share_text(check, b)
                rows.append(
                    (
                        p.label,
                        str(b),
                        f"printed (k={s.depth})",
                        _predicted(speedups.get(p.label, []), b, s.depth),
                        "",
                        f"{s.measured_speedup:.3f}" + (f", {share} of the fastest" if share else ""),
                        f"{s.tokens_per_s:.1f}",
                        f"{s.accept_len:.3f}",
                        "",
                        f"{s.depth_run:.2f}",
                        "yes" if s.greedy_equal else "NO",
                    )
                )
    return ReportTable(
        f"Served by the engine: speedup over its own plain decoding by depth ({LEVEL:.0%} intervals over prompts)",
        (
            "pairing",
            "batch",
            "k",
            "predicted",
            "specfleet engine",
            "serving engine",
            "tokens/s",
            "accept_len (engine)",
            "accept_len (curve)",
            "k ran",
            "greedy = plain",
        ),
        tuple(rows),
    )


def deepest(check, batch_size: int = 1):
    """The sweep's deepest served depth at `batch_size`: its counters cover every draft position."""
    points = [s for s in check.sweep if s.batch_size == batch_size and s.depth > 0]
    return max(points, key=lambda s: s.depth) if points else None


def served_acceptance_table(pairings) -> ReportTable:
    """The engine's acceptance per draft position (its deepest constant depth, batch size 1) against
    specfleet's survival curve with its interval, and how many positions fall inside it."""
    depth = max((len(p.measured.primary.curve.survival) for p in pairings), default=0)
    rows = []
    for p in pairings:
        check, curve = p.served.serving_check, p.measured.primary.curve
        survival = bands_of(curve, p.measured.primary.per_prompt)[0]
        point = deepest(check)
        if point is None:
            continue
        engine = point.accepted_per_pos
        inside = sum(survival.lo[j] <= engine[j] <= survival.hi[j] for j in range(min(len(engine), curve.max_depth)))
        compared = min(len(engine), curve.max_depth)
        rows.append(
            (
                p.label,
                f"{check.engine}, k={point.depth}",
                *(f"{engine[j]:.3f}" if j < len(engine) else "" for j in range(depth)),
                f"{inside}/{compared} inside",
            )
        )
        rows.append(
            (
                "",
                f"specfleet curve ({curve.condition})",
                *(_cell(survival, j) for j in range(depth)),
                "",
            )
        )
    return ReportTable(
        "Acceptance per draft position: the serving engine's share of drafts whose j-th token it accepted, "
        f"against specfleet's survival[j] ({LEVEL:.0%} interval over prompts)",
        ("pairing", "source", *(f"j={j}" for j in range(1, depth + 1)), "engine inside the interval"),
        tuple(rows),
    )


def plot_served(pairing, speedups, path: str | Path) -> Path:
    """Left: speedup by depth at every batch size the engine served, predicted (with interval) against
    the engine's measurement (and specfleet's engine at batch size 1). Right: the engine's acceptance
    per position against specfleet's survival band."""
    plt = pyplot()
    check = pairing.served.serving_check
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, b in enumerate(sorted({s.batch_size for s in check.sweep})):
        colour = f"C{i % 10}"
        points = sorted((s.depth, s.measured_speedup) for s in check.sweep if s.batch_size == b)
        left.plot(*zip(*points), "s-", ms=4, color=colour, label=f"engine, batch {b}")
        band = next((x.speedup for x in speedups if x.batch_size == b), None)
        if band is not None:
            depths = range(len(band.value))
            left.plot(depths, band.value, ":", color=colour, label=f"predicted, batch {b}")
            left.fill_between(depths, band.lo, band.hi, color=colour, alpha=0.12)
        for s in (s for s in check.chosen if s.batch_size == b):
            left.plot([s.depth], [s.measured_speedup], "*", ms=12, color=colour)
    if pairing.validated:
        ours = pairing.validated.speedup_check.measured_speedup
        left.plot(range(len(ours)), ours, "o--", ms=3, color="grey", label="specfleet engine, batch 1")
    left.axhline(1.0, color="grey", lw=0.8)
    left.set(xlabel="depth k", ylabel="speedup over plain decoding", title="speedup (star: the printed config)")
    left.legend(fontsize=7)
    if pairing.measured:
        curve = pairing.measured.primary.curve
        survival = bands_of(curve, pairing.measured.primary.per_prompt)[0]
        depths = range(1, curve.max_depth + 1)
        right.plot(depths, survival.value, "o-", ms=3, color="C0", label=f"specfleet ({curve.condition})")
        right.fill_between(depths, survival.lo, survival.hi, color="C0", alpha=0.15)
    point = deepest(check)
    if point is not None:
        right.plot(
            range(1, len(point.accepted_per_pos) + 1), point.accepted_per_pos, "s--", color="C3", label=check.engine
        )
    right.set(xlabel="draft position j", ylabel="share accepted", ylim=(0, 1.02), title="acceptance per position")
    right.legend(fontsize=7)
    integer_depths([left, right])
    return save_figure(fig, path, f"{pairing.label} served by {check.engine} on {check.hardware}")


def cost_source_table(pairings) -> ReportTable:
    """Per batch size, the iteration cost by depth as specfleet timed it and as the serving engine's
    clock shows it (pipeline/core/engine_costs.py), the depth each source chooses with specfleet's
    curve, and each choice's share of the engine's fastest depth."""
    rows, depth = [], 0
    for p in pairings:
        for cmp in cost_comparison(p.served.serving_check):
            depth = max(depth, len(cmp.depths))
            rows.append(
                (
                    p.label,
                    str(cmp.batch_size),
                    *(f"{o:.2f} / {e:.2f}" for o, e in zip(cmp.ours, cmp.engine)),
                    f"k={cmp.ours_depth}: {cmp.ours_share:.1%}",
                    f"k={cmp.engine_depth}: {cmp.engine_share:.1%}",
                )
            )
    rows = [(*r[:2], *r[2:-2], *([""] * (depth - len(r) + 4)), *r[-2:]) for r in rows]
    return ReportTable(
        "Iteration cost relative to plain decoding, the costs the choice used (specfleet's timed passes, or "
        "the engine's own where cost.timed_by says so) / this serving check's clock; the depth each chooses "
        "with specfleet's curve, and its share of the engine's fastest",
        ("pairing", "batch", *(f"k={k}" for k in range(depth)), "the choice's costs", "this check's clock"),
        tuple(rows),
    )


def printed_config_table(pairings) -> ReportTable:
    """The config each serving check printed and served, its drafter path as the worker had it (the
    appendix: the path names a checkpoint folder or the worker's temporary copy)."""
    return ReportTable(
        "Configs the serving checks printed, as the engine ran them on the worker",
        ("pairing", "engine", "printed config"),
        tuple(
            (
                p.label,
                p.served.serving_check.engine,
                p.served.serving_check.speculative_config or "(serve without speculation)",
            )
            for p in pairings
        ),
    )
