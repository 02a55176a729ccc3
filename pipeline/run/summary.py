"""What `specfleet run` reads back after a run: the plan's finished results as the rows its summary
tables show, and the plan as a table for --dry-run."""

from __future__ import annotations

import dataclasses

from rich.table import Table


def finished_of(plan, store, kind: str):
    """(job, typed result) of this plan's finished jobs of one kind (run now or reused)."""
    from pipeline.run.record import finished

    for job in plan.jobs:
        result = finished(store, kind, job.hash) if job.kind == kind else None
        if result is not None:
            yield job, result


def selected_rows(plan, store) -> list[dict]:
    """The depth and tree choices of this plan's select jobs, as the summary table's rows (the keys
    of a `best` row that the table reads), with the tree's measured gain where it was validated."""
    from db.rows import category_depth_rows

    measured = {
        (target, drafter): check.tree.over_chain
        for target, drafter, check in speedup_checks(plan, store)
        if check.tree is not None
    }
    return [
        {
            "target": job.target,
            "drafter": job.drafter,
            "hardware": selected.hardware,
            **dataclasses.asdict(selected.choice),
            "categories": category_depth_rows(job.target, job.drafter, selected),
            "tree": selected.tree and selected.tree.tree,
            "tree_speedup": selected.tree and selected.tree.speedup,
            "tree_chain_speedup": selected.tree and selected.tree.chain_speedup,
            "tree_measured_over_chain": measured.get((job.target, job.drafter)),
        }
        for job, selected in finished_of(plan, store, "select_depth")
    ]


def speedup_checks(plan, store) -> list[tuple[str, str, object]]:
    """The engine benchmarks of this plan's measure_speedup jobs."""
    return [
        (job.target, job.drafter, validated.speedup_check)
        for job, validated in finished_of(plan, store, "measure_speedup")
    ]


def plan_table(plan, store) -> Table:
    """Every job of the plan, its inputs and resources, and whether a run would reuse it (`store`:
    the database, or None when there is none yet)."""
    from pipeline.run.record import finished

    table = Table(title=f"plan: {len(plan.jobs)} jobs (code {plan.code_version})")
    for col in ("kind", "name", "hash", "inputs", "cpus", "gpus", "state"):
        table.add_column(col)
    short = {j.hash: j.hash[:10] for j in plan.jobs}
    for j in plan.jobs:
        state = "reuse" if store is not None and finished(store, j.kind, j.hash) is not None else "run"
        table.add_row(
            j.kind,
            j.name,
            short[j.hash],
            ", ".join(f"{n}={short[h]}" for n, h in j.deps),
            f"{j.num_cpus:g}",
            f"{j.num_gpus:g}",
            state,
        )
    return table
