"""The live view of a run: one bar for the whole plan, one per running job, status counts."""
from __future__ import annotations

from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text


class ProgressView:
    def __init__(self, console, jobs: dict, cached: set[str]):
        self.jobs = jobs
        self.cached = cached
        self.bars = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[note]}"),
            TimeElapsedColumn(), console=console,
        )
        self.overall = self.bars.add_task("jobs", total=len(jobs), completed=len(cached), note="")
        self.tasks: dict[str, int] = {}
        self.counts = Text()
        self.live = Live(Group(self.bars, self.counts), console=console, refresh_per_second=4, transient=False)

    def __enter__(self):
        self.live.__enter__()
        return self

    def __exit__(self, *exc):
        self.live.__exit__(*exc)
        self.live.console.print()

    def update(self, board: dict, summary) -> None:
        finished = set(summary.done) | set(summary.failed)
        for h, state in board.items():
            if h in finished:
                continue
            if h not in self.tasks:
                self.tasks[h] = self.bars.add_task(self.jobs[h].name, total=state.get("total") or 1, note="running")
            if "step" in state:
                self.bars.update(self.tasks[h], total=state["total"], completed=state["step"],
                                 note=f"loss {state['loss']:.3f}" if state["loss"] == state["loss"] else "")
        for h in finished & set(self.tasks):
            note = "failed" if h in summary.failed else "done"
            self.bars.update(self.tasks[h], completed=self.bars.tasks[self.tasks[h]].total, note=note)
            self.bars.stop_task(self.tasks[h])
        running = len([h for h in board if h not in finished])
        done = len(summary.done)
        pending = len(self.jobs) - len(self.cached) - done - len(summary.failed) - running
        self.bars.update(self.overall, completed=len(self.cached) + done + len(summary.failed))
        self.counts.plain = (f"pending {pending}  running {running}  done {done}  "
                             f"cached {len(self.cached)}  failed {len(summary.failed)}")
