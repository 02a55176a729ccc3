"""`specfleet status` on jobs recorded as running: one whose driver's process has ended, or whose
lease ran out, is shown as stale with why and the rerun that resumes it; one whose driver still
holds it (alive here, or elsewhere under a lease that holds) stays running."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console
from sqlalchemy import create_engine, update

from db.store import Store
from db.tables import JobRecord

HOST = socket.gethostname()
EXPIRED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _dead_pid() -> int:
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    return ended.pid


@pytest.fixture
def db(tmp_path):
    """A database holding experiment `fleet`: a job done, and four recorded as running: `gone` (its
    driver's process here has ended), `expired` (a driver elsewhere whose lease ran out at EXPIRED),
    `alive` (this process, under a lease) and `remote` (a driver elsewhere, under a lease)."""
    dead = _dead_pid()
    url = f"sqlite:///{tmp_path / 'specfleet.db'}"
    owners = {
        "gone": f"{HOST}:{dead}:0123abcd",
        "expired": "elsewhere.example:4242:89abcdef",
        "alive": f"{HOST}:{os.getpid()}:fedcba98",
        "remote": "elsewhere.example:4343:76543210",
    }
    with Store(url) as store:
        experiment = store.ensure_experiment(
            name="fleet", spec_hash="f" * 64, spec_yaml="name: fleet", code_version="c"
        )
        names = ["finished", *owners]
        store.link_jobs(
            experiment,
            [{"job_hash": f"{n:0<64}", "kind": "train_target", "name": n, "config": {"n": n}} for n in names],
        )
        store.mark_running(f"{'finished':0<64}", mlflow_run_id=None)
        store.mark_done(f"{'finished':0<64}", result={"ok": True})
        for name, owner in owners.items():
            assert store.claim([f"{name:0<64}"], owner=owner, lease_s=600) == {}
            store.mark_running(f"{name:0<64}", mlflow_run_id=None, owner=owner)
    engine = create_engine(url)
    with engine.begin() as connection:  # the driver elsewhere stopped renewing: its lease ran out
        connection.execute(update(JobRecord).where(JobRecord.name == "expired").values(lease_until=EXPIRED))
    engine.dispose()
    return url, dead


def _status(monkeypatch, url: str) -> list[str]:
    """`specfleet status --db URL`'s lines, on a console wide enough that no cell wraps."""
    from pipeline.cli import experiments

    screen = io.StringIO()
    monkeypatch.setattr(experiments, "out", Console(file=screen, width=400))
    experiments.status(job=None, workdir=Path(".specfleet"), db=url)
    return screen.getvalue().splitlines()


def _row(lines: list[str], name: str) -> list[str]:
    (row,) = [cells for line in lines if len(cells := [c.strip() for c in line.split("│")]) > 3 and cells[2] == name]
    return row


def test_running_jobs_without_a_driver_are_shown_as_stale_with_why(db, monkeypatch):
    url, dead = db
    lines = _status(monkeypatch, url)
    assert "done 1, running 2, stale 2, pending 0, failed 0" in lines[0]
    assert _row(lines, "gone")[3] == f"stale: driver gone (pid {dead} on host {HOST})"
    assert _row(lines, "expired")[3] == (
        "stale: lease expired at 2026-01-02 03:04:05 UTC (pid 4242 on host elsewhere.example)"
    )
    assert _row(lines, "alive")[3] == "running" and _row(lines, "remote")[3] == "running"
    assert _row(lines, "finished")[3] == "done"
    assert lines[-1] == (
        "2 stale job(s) of fleet: their driver is gone or stopped renewing its lease. Run its spec again "
        "(specfleet run SPEC) to resume: it takes them over, runs them again and reuses every finished job."
    )


def test_the_jobs_shown_stale_are_those_a_rerun_takes_over_and_then_they_are_not(db, monkeypatch):
    """What status calls stale and what the next run's claim (db/store.py) may take over are one rule:
    the claim is refused the jobs shown running, takes the stale ones, and status then shows them
    as the claim left them (failed: their driver ended while they ran), with no rerun hint."""
    url, _ = db
    running = ("gone", "expired", "alive", "remote")
    lines = _status(monkeypatch, url)
    stale = {name for name in running if _row(lines, name)[3].startswith("stale: ")}
    rerun = f"{HOST}:{os.getpid()}:22222222"
    with Store(url) as store:
        held = store.claim([f"{n:0<64}" for n in running], owner=rerun, lease_s=600)  # all or none
        assert {h.rstrip("0") for h in held} == set(running) - stale
        assert store.claim([f"{n:0<64}" for n in sorted(stale)], owner=rerun, lease_s=600) == {}
    lines = _status(monkeypatch, url)
    assert "done 1, running 2, pending 0, failed 2" in lines[0]
    assert _row(lines, "gone")[3] == "failed" and _row(lines, "expired")[3] == "failed"
    assert not any("stale" in line for line in lines)


def test_one_job_in_full_names_its_driver_and_lease(db, capsys):
    from pipeline.cli import experiments

    url, dead = db
    experiments.status(job="gone", workdir=Path(".specfleet"), db=url)
    shown = capsys.readouterr().out.splitlines()
    assert f"status: stale: driver gone (pid {dead} on host {HOST})" in shown
    assert f"owner: {HOST}:{dead}:0123abcd" in shown
    experiments.status(job="expired", workdir=Path(".specfleet"), db=url)
    shown = capsys.readouterr().out.splitlines()
    assert "status: stale: lease expired at 2026-01-02 03:04:05 UTC (pid 4242 on host elsewhere.example)" in shown
    assert "lease_until: 2026-01-02T03:04:05+00:00" in shown
    experiments.status(job="alive", workdir=Path(".specfleet"), db=url)
    assert "status: running" in capsys.readouterr().out.splitlines()
