"""Checkpoints by reference: a two-node cluster whose nodes share no folder, against an `mlflow server`.

The drafter is trained on one node, which then leaves the cluster; a second node, with a work
and cache directory of its own, measures it: it can only have fetched the checkpoint from the
server's artifact store, by the reference the database recorded. The driver never holds it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import free_port, running_mlflow_server

from db.store import Store
from pipeline.core.files import dir_hash

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.long]  # tests/README.md: markers

SPEC = {
    "name": "by-reference",
    "seed": 0,
    "targets": [
        {
            "name": "t0",
            "builtin": {
                "layers": 4,
                "hidden_size": 64,
                "heads": 4,
                "intermediate_size": 128,
                "vocab_size": 400,
                "train": {"steps": 10, "lr": 0.003, "batch_size": 8, "seq_len": 64},
            },
        }
    ],
    "drafters": [
        {
            "name": "post",
            "kind": "eagle3",
            "norm": "post",
            "fc_norm": True,
            "train": {"ttt_depth": 2, "steps": 5, "batch_size": 8, "seq_len": 64},
        }
    ],
    "evaluation": {"max_depth": 2, "num_prompts": 2, "prompt_len": 16, "continuation_len": 4},
    "cost": {"context_len": 16, "warmup": 1, "repeats": 1, "batch_sizes": [1], "max_batch_size": 1, "cost_ratio": 0.1},
    "resources": {
        kind: {"num_cpus": 1}
        for kind in ("train_target", "train_drafter", "measure_curve", "profile_cost", "select_depth")
    },
}


@pytest.fixture(scope="module")
def artifact_server(tmp_path_factory):
    """(tracking URI, artifact folder) of an MLflow server that proxies its artifact store."""
    root = tmp_path_factory.mktemp("mlflow-server")
    with running_mlflow_server(
        "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination", str(root / "artifacts")
    ) as port:
        yield f"http://127.0.0.1:{port}", root / "artifacts"


def _node_dirs(root: Path) -> dict:
    """A node's own cache and temporary directory (its raylet and workers inherit them)."""
    for name in ("cache", "tmp"):
        (root / name).mkdir(parents=True, exist_ok=True)
    return {"SPECFLEET_CACHE": str(root / "cache"), "TMPDIR": str(root / "tmp")}


def _run(spec: dict, driver: Path, address: str, tracking: str) -> subprocess.CompletedProcess:
    path = driver / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", **_node_dirs(driver)}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(path), "--address", address, "--mlflow", tracking],
        cwd=driver,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_drafter_trained_on_one_node_is_measured_on_another_without_a_shared_folder(tmp_path, artifact_server):
    from ray.cluster_utils import Cluster

    tracking, served = artifact_server
    driver, first, second = tmp_path / "driver", tmp_path / "node-a", tmp_path / "node-b"
    driver.mkdir()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={  # the head runs no job: it has no CPU
            "num_cpus": 0,
            "gcs_server_port": free_port(),
            "node_ip_address": "127.0.0.1",
            "include_dashboard": False,
            "env_vars": _node_dirs(tmp_path / "head"),
        },
    )
    try:
        node_a = cluster.add_node(num_cpus=2, node_ip_address="127.0.0.1", env_vars=_node_dirs(first))
        cluster.wait_for_nodes()
        done = _run(SPEC, driver, cluster.address, tracking)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "5 ran, 0 reused, 0 failed" in done.stdout

        cluster.remove_node(node_a)  # the node that trained it is gone, and its folders with it
        cluster.add_node(num_cpus=2, node_ip_address="127.0.0.1", env_vars=_node_dirs(second))
        cluster.wait_for_nodes()
        # another temperature: the curve is measured anew; the cost table, timed on the same prompts, is not
        remeasured = {**SPEC, "evaluation": {**SPEC["evaluation"], "temperatures": [0.0, 1.0]}}
        again = _run(remeasured, driver, cluster.address, tracking)
        assert again.returncode == 0, again.stderr[-3000:]
        assert "2 ran, 3 reused, 0 failed" in again.stdout  # the models and timings reused, measured anew
    finally:
        cluster.shutdown()

    store = Store(f"sqlite:///{driver / '.specfleet' / 'specfleet.db'}")
    try:
        jobs = {j["kind"]: j for j in store.jobs() if j["kind"] in ("train_target", "train_drafter")}
        trained = {kind: store.finished_result(j["job_hash"]) for kind, j in jobs.items()}
    finally:
        store.close()
    for kind, result in trained.items():
        # the reference is the server's own address: any node reads it with nothing else configured
        assert result["files_uri"].startswith(f"{tracking}/api/2.0/mlflow-artifacts/artifacts/"), result["files_uri"]
        # under the job, named by content: two attempts of a job never share a folder
        assert result["files_uri"].endswith(f"/checkpoints/{jobs[kind]['job_hash']}/{result['files_sha256'][:16]}")
        kept = next(served.rglob(result["files_sha256"][:16]))  # in the server's artifact store
        assert dir_hash(kept) == result["files_sha256"]
        assert {p.name for p in kept.iterdir()} == set(result["file_sizes"])
        # the second node fetched it into its own cache, checked; the first had it from training
        for node in (first, second):
            assert dir_hash(node / "cache" / result["files_sha256"][:32]) == result["files_sha256"]
    drafter = trained["train_drafter"]
    assert "model.safetensors" in drafter["file_sizes"] and "files" not in drafter
    # the driver held no weights: no checkpoint folder in its work directory, nothing in its cache
    assert not (driver / ".specfleet" / "checkpoints").exists()
    assert not list(driver.rglob("*.safetensors"))
