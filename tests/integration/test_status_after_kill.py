"""A driver killed (SIGKILL) while it records a job leaves that job recorded as running: `specfleet
status` shows it as stale, naming the killed driver's pid and host, with the rerun that resumes it;
after that rerun nothing is stale and every job is done."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import with_mlflow_store
from support.paths import SUPPORT

from db.store import Store

pytestmark = pytest.mark.slow  # tests/README.md: markers


def _drive(workdir: Path, *kill: str) -> subprocess.Popen:
    """tests/support/kill_driver.py on `workdir`, ended."""
    driver = subprocess.Popen(
        [sys.executable, str(SUPPORT / "kill_driver.py"), str(workdir), *kill],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    driver.communicate(timeout=300)
    return driver


def _status(workdir: Path, *args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "status", *args, "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=workdir,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()


def test_a_killed_drivers_job_is_shown_stale_until_a_rerun_resumes_it(tmp_path, mlflow_template):
    with_mlflow_store(tmp_path, mlflow_template)
    killed = _drive(tmp_path, "record", "1")  # MLflow written, the database not yet marked done
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    with Store(f"sqlite:///{tmp_path / 'specfleet.db'}") as store:
        (job,) = [j for j in store.jobs() if j["status"] == "running"]
    shown = _status(tmp_path, "--job", job["name"])
    assert f"status: stale: driver gone (pid {killed.pid} on host {socket.gethostname()})" in shown
    table = _status(tmp_path)
    assert ", running 0, stale 1, " in table[0]
    assert table[-1].startswith("1 stale job(s) of inproc: their driver is gone") and "specfleet run SPEC" in table[-1]

    rerun = _drive(tmp_path)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    table = _status(tmp_path)
    assert ", running 0, pending 0, failed 0" in table[0] and not any("stale" in line for line in table)
    with Store(f"sqlite:///{tmp_path / 'specfleet.db'}") as store:
        assert {j["status"] for j in store.jobs()} == {"done"}
