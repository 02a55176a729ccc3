"""A serving engine's checks as console tables (`specfleet speedups`): per pairing, every batch size
with the printed config's row first and the constant-depth sweep under it, the engine's acceptance
beside specfleet's, and the verdict."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

COLUMNS = (
    "batch",
    "config",
    "k",
    "k ran",
    "tokens/s",
    "measured",
    "predicted",
    "accept_len (engine)",
    "accept_len (specfleet)",
    "greedy = plain",
)


def share_text(check, batch_size: int) -> str:
    """The printed config's share of the engine's fastest depth at a batch size, with its interval
    where the engine's repeats gave one ("" where the check has no share for that batch size)."""
    share = check.chosen_vs_best.get(batch_size)
    if share is None:
        return ""
    lo, hi = check.chosen_vs_best_interval.get(batch_size, (share, share))
    return f"{share:.1%}" + (f" [{lo:.1%}, {hi:.1%}]" if hi > lo else "")


def serving_tables(checks: list[tuple]) -> Group:
    """One table per (target, drafter, ServingCheck), each followed by its verdict and notes."""
    parts = []
    for target, drafter, check in checks:
        table = Table(title=f"{target}/{drafter} served by {check.engine} on {check.hardware}")
        for col in COLUMNS:
            table.add_column(col, justify="left" if col == "config" else "right")
        for b in sorted({p.batch_size for p in check.sweep}):
            printed = [p for p in check.chosen if p.batch_size == b]
            for label, point in [("printed", p) for p in printed] + [
                ("sweep" + (", fastest" if p.depth == check.best_depth.get(b) else ""), p)
                for p in check.sweep
                if p.batch_size == b
            ]:
                table.add_row(
                    str(b),
                    label,
                    str(point.depth),
                    f"{point.depth_run:.2f}",
                    f"{point.tokens_per_s:.1f}",
                    f"{point.measured_speedup:.3f}x",
                    f"{point.predicted_speedup:.3f}x",
                    f"{point.accept_len:.3f}",
                    f"{point.curve_accept_len:.3f}",
                    "yes" if point.greedy_equal else "NO",
                )
            table.add_section()
        verdict = "passed" if check.passed else "FAILED: " + "; ".join(check.problems)
        shares = "; ".join(f"batch size {b}: {share_text(check, b)}" for b in sorted(check.chosen_vs_best))
        lines = [Text(f"verdict: {verdict}"), Text(f"printed config's share of the fastest depth: {shares}")]
        lines += [Text(f"note: {n}") for n in check.notes]
        parts += [table, *lines, Text(f"printed config: {check.speculative_config or '(serve without speculation)'}")]
    return Group(*parts)
