"""Overlong and odd values through every command that writes (run, report, bench; autotune's are in
tests/pipeline/autotune/test_hostile_metrics.py), on SQLite and PostgreSQL: each is one `error:`
line (a spec's errors: its file, then a line each), a non-zero exit, no traceback, and nothing
written to the database, MLflow or the output folder."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from support.paths import REPO

from db.store import Store

LONG = "x" * 300


def _specfleet(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SPECFLEET_DB", "MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=180
    )


@pytest.mark.slow
def test_overlong_values_through_run_report_and_bench_write_nothing(tmp_path, db_url):
    with Store(db_url) as store:
        store.ensure_experiment(name="e1", spec_hash="a" * 64, spec_yaml="name: e1\n", code_version="v")
    work = tmp_path / "wd"  # (the SQLite database is in tmp_path / "work")
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {"name": "h", "targets": [{"name": "t", "hf": str(tmp_path / LONG)}], "drafters": [{"name": "d"}]}
        )
    )
    cases = [  # (arguments, exit code, the line that names the problem)
        (["run", str(spec)], 2, "targets[0]: hf: cannot read '/"),
        (["run", str(tmp_path / (LONG + ".yaml"))], 2, "(file): cannot read it: File name too long"),
        (["report", "e1", "--out", str(tmp_path / "out" / LONG)], 1, "error: --out: cannot write to"),
        (["report", LONG], 1, "error: EXPERIMENT: no experiment 'xxx"),
        (["report", "e1", LONG], 1, "error: EXPERIMENT: no experiment 'xxx"),
        (["report", "e1\nmore"], 1, "error: EXPERIMENT: no experiment 'e1\\nmore'"),
        (["bench", "--spec", str(REPO / "experiments/bench.yaml"), "--out", str(tmp_path / LONG)], 1, "error: --out:"),
        (["bench", "--spec", str(spec), "--out", str(tmp_path / "bench")], 2, "targets[0]: hf: cannot read"),
    ]
    for args, code, message in cases:
        stores = ["--db", db_url, "--workdir", str(work)] if args[0] != "bench" else []
        done = _specfleet(*args, *stores, cwd=tmp_path)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == code and "Traceback" not in done.stderr, (args[0], done.stderr[-2000:])
        assert lines and lines[-1].startswith(message) and all(len(line) < 500 for line in lines), (args[0], lines)
        assert len(lines) == (2 if code == 2 else 1), lines  # a spec's errors: its file, then the error
    assert not work.exists() and not (tmp_path / "out").exists() and not (tmp_path / "bench").exists()
    with Store(db_url) as store:  # the database holds the one experiment it had, and nothing else
        assert [e["name"] for e in store.experiments()] == ["e1"]
        assert store.jobs() == [] and store.best(history=True) == []
