"""Progress where the output is not a terminal: plain lines a log can keep."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from pipeline.run.progress import ProgressView


def test_plain_lines_say_each_job_started_and_ended_and_close_with_the_counts():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    jobs = {
        "a": SimpleNamespace(name="train_drafter t/a"),
        "b": SimpleNamespace(name="measure_curve t/b"),
        "c": SimpleNamespace(name="select_depth t/c"),
    }
    summary = SimpleNamespace(done=[], failed={})
    with ProgressView(console, jobs, cached={"c"}) as view:
        view.update({"a": {"step": 1, "total": 10, "loss": 2.5}}, summary)
        summary.done.append("a")
        summary.failed["b"] = "not run: an upstream job failed"  # never ran, so never "started"
        view.update({"a": {"step": 10, "total": 10, "loss": 1.0}}, summary)
        view.update({}, summary)  # nothing is said twice
    lines = [line.split("] ", 1)[-1] for line in out.getvalue().splitlines()]
    assert lines == [
        "started train_drafter t/a",
        "done train_drafter t/a",
        "failed measure_curve t/b",
        "done 1  cached 1  failed 1  of 3 jobs",
    ]


def test_a_job_that_finished_between_two_looks_still_gets_its_started_line():
    out = io.StringIO()
    jobs = {"a": SimpleNamespace(name="select_depth t/a")}
    with ProgressView(Console(file=out, force_terminal=False, width=200), jobs, cached=set()) as view:
        view.update({}, SimpleNamespace(done=["a"], failed={}))
    lines = [line.split("] ", 1)[-1] for line in out.getvalue().splitlines()]
    assert lines == ["started select_depth t/a", "done select_depth t/a", "done 1  cached 0  failed 0  of 1 jobs"]
