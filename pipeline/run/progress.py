"""The live view of a run: one bar for the whole plan, one per running job, status counts.

On a terminal the bars redraw in place; anywhere else (a log file, a pipe, CI) the same news
comes as plain lines: a job started, its step every PLAIN_EVERY seconds, finished or failed.
"""

from __future__ import annotations

import time

from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

PLAIN_EVERY = 60.0


class ProgressView:
    def __init__(self, console, jobs: dict, cached: set[str]):
        self.jobs = jobs
        self.cached = cached
        self.console = console
        self.plain = not console.is_terminal
        self.said: dict[str, float] = {}  # plain mode: job hash -> when its last line was written
        self.last = None  # plain mode: the newest run summary, for the closing line
        self.t0 = time.monotonic()
        self.bars = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[note]}"),
            TimeElapsedColumn(),
            console=console,
        )
        self.overall = self.bars.add_task("jobs", total=len(jobs), completed=len(cached), note="")
        self.tasks: dict[str, int] = {}
        self.counts = Text()
        self.live = Live(Group(self.bars, self.counts), console=console, refresh_per_second=4, transient=False)

    def __enter__(self):
        if not self.plain:
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if not self.plain:
            self.live.__exit__(*exc)
            self.live.console.print()
        elif self.last is not None:
            s = self.last
            self._say(
                f"done {len(s.done)}  cached {len(self.cached)}  failed {len(s.failed)}  of {len(self.jobs)} jobs"
            )

    def update(self, board: dict, summary) -> None:
        if self.plain:
            self._lines(board, summary)
            self.last = summary
            return
        finished = set(summary.done) | set(summary.failed)
        for h, state in board.items():
            if h in finished:
                continue
            if h not in self.tasks:
                self.tasks[h] = self.bars.add_task(self.jobs[h].name, total=state.get("total") or 1, note="running")
            if "step" in state:
                self.bars.update(
                    self.tasks[h],
                    total=state["total"],
                    completed=state["step"],
                    note=f"loss {state['loss']:.3f}" if state["loss"] == state["loss"] else "",
                )
        for h in finished & set(self.tasks):
            note = "failed" if h in summary.failed else "done"
            self.bars.update(self.tasks[h], completed=self.bars.tasks[self.tasks[h]].total, note=note)
            self.bars.stop_task(self.tasks[h])
        running = len([h for h in board if h not in finished])
        done = len(summary.done)
        pending = len(self.jobs) - len(self.cached) - done - len(summary.failed) - running
        self.bars.update(self.overall, completed=len(self.cached) + done + len(summary.failed))
        self.counts.plain = (
            f"pending {pending}  running {running}  done {done}  "
            f"cached {len(self.cached)}  failed {len(summary.failed)}"
        )

    def _lines(self, board: dict, summary) -> None:
        now = time.monotonic()
        stamp = f"[{now - self.t0:7.0f} s]"
        for h in list(summary.done) + list(summary.failed):
            if self.said.get(h, 0.0) >= 0 and h in self.jobs and h not in self.cached:
                what = "failed" if h in summary.failed else "done"
                if h not in self.said and what == "done":  # finished between two looks, never seen running
                    self._say(f"{stamp} started {self.jobs[h].name}")
                self._say(f"{stamp} {what} {self.jobs[h].name}")
                self.said[h] = -1.0  # said for good
        for h, state in board.items():
            if self.said.get(h) == -1.0 or h not in self.jobs:
                continue
            if h not in self.said:
                self._say(f"{stamp} started {self.jobs[h].name}")
                self.said[h] = now
            elif "step" in state and now - self.said[h] >= PLAIN_EVERY:
                loss = f", loss {state['loss']:.3f}" if state["loss"] == state["loss"] else ""
                self._say(f"{stamp} {self.jobs[h].name}: {state['step']}/{state['total']}{loss}")
                self.said[h] = now

    def _say(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)
