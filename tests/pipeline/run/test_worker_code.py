"""The workers of a Ray cluster specfleet starts run the driver's code, even when the command starts
in a folder holding another copy of specfleet's packages (an older checkout): Ray puts that
folder first on its workers' import path. Here the copy's workers report a device of their own
("decoy checkout"), so a worker that imported it says so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.paths import REPO

pytestmark = [pytest.mark.ray, pytest.mark.slow]

DECOY = "decoy checkout"

DRIVER = textwrap.dedent("""
    import json, sys
    from pipeline.run.ray_cluster import connect

    cluster = connect(sys.argv[1] if len(sys.argv) > 1 else None, {})
    try:
        seen = cluster.probe(1, 0, None)  # a Ray task: what the worker's workers.runtime.environment says
    finally:
        cluster.close()
    print("RESULT " + json.dumps(seen.device))
""")


def _checkout_with_decoy(folder: Path) -> Path:
    """`folder` holding a copy of pipeline/, workers/ and db/ whose worker_env reports DECOY."""
    for package in ("pipeline", "workers", "db"):
        shutil.copytree(REPO / package, folder / package, ignore=shutil.ignore_patterns("__pycache__"))
    environment = folder / "workers" / "runtime" / "environment.py"
    environment.write_text(
        environment.read_text()
        + f"\n\ndef worker_env(num_gpus):\n    return WorkerEnv(device={DECOY!r}, cuda='none', driver='none', "
        "torch='0', transformers='0')\n"
    )
    return folder


def _env(tmp_path: Path, *, keep_token: bool = False) -> dict:
    """The command's environment: the installed code only, Ray's files under a folder of its own
    (and, to join the session's cluster, its token kept)."""
    dropped = ("RAY_ADDRESS", "PYTHONPATH") if keep_token else ("RAY_AUTH", "RAY_ADDRESS", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    temp = Path(f"/tmp/sfw-{os.getpid()}")  # Ray's temp folder: socket paths must fit in 107 characters
    return {**env, "HOME": str(tmp_path), "RAY_TMPDIR": str(temp), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def _here() -> str:
    from workers.runtime.environment import worker_env

    return worker_env(0).device


def _drive(tmp_path: Path, *address: str) -> str:
    """What a worker of connect(address, or None: a local cluster) reports, the driver started in
    a checkout holding the decoy."""
    checkout = _checkout_with_decoy(tmp_path / "checkout")
    script = tmp_path / "driver" / "drive.py"  # outside the checkout: the driver imports the installed code
    script.parent.mkdir()
    script.write_text(DRIVER)
    env = _env(tmp_path, keep_token=bool(address))
    try:
        done = subprocess.run(
            [sys.executable, str(script), *address], cwd=checkout, env=env, capture_output=True, text=True, timeout=300
        )
    finally:
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.split("RESULT ", 1)[1])


def test_a_local_clusters_workers_run_the_drivers_code_not_the_started_in_folders(tmp_path):
    assert _drive(tmp_path) == _here()


def test_a_joined_clusters_workers_run_the_drivers_code_though_its_nodes_hold_the_started_in_folder(
    tmp_path, ray_cluster
):
    """Shipping the packages (py_modules) alone is not enough: a node that has the folder the driver
    started in (this machine, a shared home directory) would still put that folder first."""
    assert _drive(tmp_path, ray_cluster) == _here()


def test_specfleet_run_from_a_checkout_plans_for_what_the_drivers_code_reports(tmp_path):
    """The real command, whose local cluster (started for its runtime_env) is asked which worker the
    timing jobs get: the answer comes from the installed code, not the folder's copy."""
    checkout = _checkout_with_decoy(tmp_path / "checkout")
    env = _env(tmp_path)
    command = [
        str(Path(sys.executable).parent / "specfleet"),
        "run",
        str(REPO / "experiments" / "quickstart.yaml"),
        "--dry-run",
        "--runtime-env",
        '{"env_vars": {"SPECFLEET_DECOY_TEST": "1"}}',
        "--workdir",
        str(tmp_path / "work"),
    ]
    try:
        done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert DECOY not in done.stderr
    assert f"timing jobs planned for {_here()} (CUDA none" in done.stderr
