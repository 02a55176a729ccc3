"""What `specfleet autotune` reads of a tuned config to print an engine config: the depth schedule,
the draft tree (only where it is predicted to beat the chain), the drafting rule at T > 0 and a
DFlash drafter's block rule.

The rows are the store's tuned configs (db/rows.tuned_config); `choice_row` gives the same fields
straight from a depth choice, so a serving check (workers/jobs/serve_check.py) prints exactly what
autotune would print for it, before any row exists.
"""

from __future__ import annotations

from pipeline.core.contracts import Selected
from pipeline.core.tree_contracts import serves_tree


def sampling_of(row: dict) -> str | None:
    """How the row's curve drew drafts, when that matters to the engine: at temperature > 0."""
    return row.get("draft_sampling") if row.get("temperature", 0.0) > 0 else None


def block_drafting_of(row: dict) -> str:
    """How the row's DFlash curve drafted a depth below the trained block: "trained" (the whole block;
    also every row stored before this was recorded) or "depth" (a block of depth + 1)."""
    return row.get("block_drafting") or "trained"


def schedule_of(row: dict) -> list[tuple[int, int, int]]:
    """The row's per-batch-size schedule, or its single depth for every batch size."""
    if row.get("schedule"):
        return [tuple(r) for r in row["schedule"]]
    return [(1, 1, row["depth"])]


def extrapolated(row: dict) -> tuple[int, int] | None:
    """The batch sizes (lo, hi) the row's schedule covers past those whose depth was measured, or None."""
    measured, schedule = row.get("schedule_measured_to"), row.get("schedule")
    if measured is None or not schedule or schedule[-1][1] <= measured:
        return None
    return measured + 1, schedule[-1][1]


def unmeasured_note(row: dict) -> str | None:
    """What the row's schedule claims beyond the batch sizes whose depth was measured, or None."""
    measured = row.get("schedule_measured_to")
    if measured is None or not row.get("schedule"):
        return None
    past = extrapolated(row)
    unmeasured = f"; batch sizes {past[0]}-{past[1]} keep that depth unmeasured (extrapolated)" if past else ""
    return (
        f"depths were measured at batch sizes up to {measured}{unmeasured}; add larger cost.batch_sizes to choose "
        "for larger batches"
    )


def tree_of(row: dict):
    """The row's draft tree when it is predicted to beat the chain it was compared with, else None."""
    tree = row.get("tree")
    if not serves_tree(tree, row.get("tree_speedup"), row.get("tree_chain_speedup"), row.get("tree_all_batches")):
        return None
    return [tuple(n) for n in tree]


def choice_row(selected: Selected) -> dict:
    """The fields of the tuned-config row a depth choice becomes (db/rows.tuned_config) that the
    functions above read."""
    tree = selected.tree
    return {
        "depth": selected.choice.depth,
        "schedule": [list(r) for r in selected.schedule] if selected.schedule is not None else None,
        "schedule_measured_to": selected.schedule_measured_to,
        "temperature": selected.temperature,
        "draft_sampling": selected.draft_sampling,
        "block_drafting": selected.block_drafting,
        "tree": [list(n) for n in tree.tree] if tree is not None else None,
        "tree_speedup": tree.speedup if tree is not None else None,
        "tree_chain_speedup": tree.chain_speedup if tree is not None else None,
        "tree_all_batches": tree.all_batches if tree is not None else None,
    }
