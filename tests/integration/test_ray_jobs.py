"""A run submitted detached through Ray's Jobs API, as Ray documents it, to a head started with
`ray start` and Ray's token authentication: the job joins the cluster and records every result."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from conftest import free_port
from support.paths import REPO

from db.store import Store

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # tests/README.md: markers

SPEC = {
    "name": "submitted",
    "seed": 0,
    "targets": [
        {
            "name": "t0",
            "builtin": {
                "layers": 4,
                "hidden_size": 32,
                "heads": 4,
                "intermediate_size": 64,
                "vocab_size": 300,
                "train": {"steps": 10, "batch_size": 4, "seq_len": 32},
            },
        }
    ],
    "drafters": [
        {"name": "pre", "kind": "eagle3", "train": {"ttt_depth": 1, "steps": 5, "batch_size": 4, "seq_len": 32}}
    ],
    "evaluation": {"max_depth": 2, "num_prompts": 2, "prompt_len": 8, "continuation_len": 4, "tree_topk": 0},
    "cost": {"context_len": 8, "warmup": 1, "repeats": 1, "batch_sizes": [1], "max_batch_size": 4, "tree_budget": 0},
}


@pytest.fixture(scope="module")
def head():
    """(Jobs API URL, token, GCS address): a one-node `ray start` head on loopback, token
    authentication on."""
    token = secrets.token_hex(32)
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    env.pop("RAY_ADDRESS", None)
    temp = Path(f"/tmp/sfjobs-{os.getpid()}")  # a short path: Ray's socket names must fit in 107 characters
    ports = {
        name: free_port()
        for name in (
            "port",
            "dashboard-port",
            "dashboard-agent-listen-port",
            "ray-client-server-port",
            "metrics-export-port",
        )
    }
    start = [
        str(Path(sys.executable).with_name("ray")),
        "start",
        "--head",
        "--node-ip-address",
        "127.0.0.1",
        "--dashboard-host",
        "127.0.0.1",
        "--include-dashboard",
        "true",
        "--num-cpus",
        "2",
        "--temp-dir",
        str(temp),
        *(x for k, v in ports.items() for x in (f"--{k}", str(v))),
    ]
    started = subprocess.run(start, env=env, capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stderr[-2000:]
    try:
        yield f"http://127.0.0.1:{ports['dashboard-port']}", token, f"127.0.0.1:{ports['port']}"
    finally:
        for proc in psutil.process_iter(["cmdline"]):  # only this head's: their command lines name its temp dir
            if str(temp) in " ".join(proc.info["cmdline"] or []):
                try:
                    proc.kill()
                except psutil.NoSuchProcess:
                    pass
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.long
def test_a_run_submitted_through_the_jobs_api_records_everything(tmp_path, head):
    from ray.job_submission import JobStatus, JobSubmissionClient

    url, token, _ = head
    staged = tmp_path / "submit"  # what `ray job submit --working-dir .` uploads from a checkout
    shutil.copytree(REPO, staged, ignore=shutil.ignore_patterns(".*", "__pycache__", "tests", "*.egg-info"))
    (staged / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    workdir = tmp_path / "store"  # the head shares this machine's disk here; on a cluster, --db and --mlflow
    client = JobSubmissionClient(url, headers={"Authorization": f"Bearer {token}"})
    job = client.submit_job(
        entrypoint=f"{sys.executable} -m pipeline run spec.yaml --workdir {workdir}",
        runtime_env={"working_dir": str(staged)},
    )
    deadline = time.monotonic() + 400
    while client.get_job_status(job) not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
        assert time.monotonic() < deadline, client.get_job_logs(job)[-3000:]
        time.sleep(1)
    logs = client.get_job_logs(job)
    assert client.get_job_status(job) == JobStatus.SUCCEEDED, logs[-3000:]
    assert "5 ran, 0 reused, 0 failed" in logs and "started train_drafter t0/pre" in logs  # plain progress lines
    with Store(f"sqlite:///{workdir / 'specfleet.db'}") as store:
        assert {j["status"] for j in store.jobs()} == {"done"} and len(store.jobs()) == 5
        (best,) = store.best()
        assert (best["target"], best["drafter"]) == ("t0", "pre")
    with pytest.raises(Exception, match="Unauthorized|Authentication"):  # the head refuses a client without it
        JobSubmissionClient(url).list_jobs()


@pytest.mark.parametrize(
    "address,message",
    [
        (
            "http://127.0.0.1:8265",
            "--address/RAY_ADDRESS: http://127.0.0.1:8265 is the cluster's Jobs API: submit the run through it",
        ),
        ("127.0.0.1:1", "--address: cannot join Ray cluster at 127.0.0.1:1: nothing answers at 127.0.0.1:1"),
    ],
)
def test_an_address_run_cannot_join_is_one_line_at_once(tmp_path, address, message):
    """A Jobs API address says how to submit; an address nothing answers at is refused at once (Ray
    itself would retry for minutes). Nothing is written."""
    env = {**os.environ, "RAY_ADDRESS": address}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SPEC))
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", "s.yaml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr and message in done.stderr
    assert time.monotonic() - t0 < 30
    assert not (tmp_path / ".specfleet").exists()  # nothing written


def test_joining_a_token_cluster_without_its_token_says_what_to_set(tmp_path, head):
    _, _, gcs = head
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(RAY_gcs_server_port_wait_time_s="3", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", HOME=str(tmp_path))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SPEC))
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", "s.yaml", "--address", gcs],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert (
        f"--address: cannot join Ray cluster at {gcs}: the cluster uses token authentication and refused "
        "this one: set RAY_AUTH_MODE=token"
    ) in done.stderr
    assert not (tmp_path / ".specfleet").exists()
