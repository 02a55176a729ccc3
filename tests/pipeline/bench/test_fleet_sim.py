"""The fleet simulation: instant jobs through the real planner, executor, MLflow and database."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.databases import PG_BASE_URL

from db.store import Store
from pipeline.bench.fleet_sim import fleet_spec, simulate
from pipeline.plan import build_plan


def test_a_fleet_is_targets_times_drafters_each_within_the_specs_limits():
    for n, shape in ((10, (1, 10)), (100, (2, 50)), (1000, (20, 50))):
        spec, _ = fleet_spec(n)
        assert (len(spec.targets), len(spec.drafters)) == shape
        assert len(build_plan(spec, "v").jobs) == 4 * n  # train_drafter, measure_curve, profile_cost, select_depth
    with pytest.raises(ValueError, match="pairings: 4099"):
        fleet_spec(4099)


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.postgres
def test_instant_fleets_run_through_both_executors_and_both_databases(tmp_path):
    rows = simulate(
        (10,), executors=("local", "ray"), postgres=PG_BASE_URL, workdir=tmp_path, log=lambda line: None, keep=True
    )
    assert [(r["executor"], r["database"]) for r in rows] == [
        ("local", "sqlite"),
        ("local", "postgresql"),
        ("ray", "sqlite"),
        ("ray", "postgresql"),
    ]
    assert all(r["jobs"] == 40 and r["run_s"] > 0 and r["ms_per_job"] > 0 for r in rows)
    folders = sorted(p for p in tmp_path.iterdir() if (p / "specfleet.db").is_file())
    assert len(folders) == 2  # the SQLite runs' databases (the PostgreSQL ones are dropped)
    for folder in folders:
        store = Store(f"sqlite:///{folder / 'specfleet.db'}")
        try:
            jobs = store.jobs()
            assert len(jobs) == 40 and {j["status"] for j in jobs} == {"done"}
            assert len(store.best()) == 10
            trained = [store.finished_result(j["job_hash"]) for j in jobs if j["kind"] == "train_drafter"]
            assert all(t["files_uri"].startswith(str(folder.resolve())) for t in trained)  # stored by reference
        finally:
            store.close()


@pytest.mark.slow
@pytest.mark.ray
def test_the_fleet_command_writes_its_table_plot_and_json(tmp_path):
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "fleet-sim", "--sizes", "1,2", "--executors", "local", "--out", "out"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads((tmp_path / "out" / "fleet.json").read_text())
    assert [(r["pairings"], r["jobs"]) for r in rows] == [(1, 4), (2, 8)]
    assert "| 2 | 8 | local | sqlite |" in (tmp_path / "out" / "fleet.md").read_text()
    assert (tmp_path / "out" / "fleet.png").stat().st_size > 10_000

    def refused(*args: str) -> str:
        bad = subprocess.run(
            [
                sys.executable,
                "-m",
                "pipeline",
                "fleet-sim",
                "--sizes",
                "1",
                "--executors",
                "local",
                "--workdir",
                "w",
                *args,
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr, bad.stderr
        return bad.stderr

    assert "--sizes" in refused("--sizes", "10,x")
    assert "--out: cannot write to" in refused("--out", "/proc/specfleet")
    assert "--postgres: cannot connect to" in refused("--postgres", "postgresql+psycopg://nobody@127.0.0.1:9/x")
    assert "not PostgreSQL" in refused("--postgres", "sqlite:///x.db")
    assert not (tmp_path / "w").exists()  # refused before anything was made
