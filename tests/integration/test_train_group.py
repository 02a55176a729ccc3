"""A drafter trained by a group of Ray Train workers through `specfleet run`: data parallel and sharded
on the two-node cluster (a worker on each node), each the drafter one process trains, recorded once;
and, on the cluster `specfleet run` starts itself, a worker killed mid-training is survived from the
group's last checkpoint."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import safetensors.torch
import yaml
from mlflow.tracking import MlflowClient

from db.store import Store
from pipeline.core.files import dir_hash
from tests.support.tiny_specs import tiny_target

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.long]


def _spec(name: str, steps: int, resources: dict) -> dict:
    return {
        "name": name,
        "seed": 0,
        "targets": [tiny_target()],
        "drafters": [
            {"name": "d", "kind": "eagle3", "norm": "post", "fc_norm": True, "train": {"ttt_depth": 2, "steps": steps}}
        ],
        "evaluation": {"max_depth": 2, "num_prompts": 2, "prompt_len": 16, "continuation_len": 4},
        "cost": {"context_len": 16, "warmup": 0, "repeats": 1, "cost_ratio": 0.01},
        "resources": resources,
    }


def _run(workdir: Path, spec: dict, *address: str, env: dict | None = None, background: bool = False):
    path = workdir / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", **(env or {})}
    env.pop("RAY_ADDRESS", None)
    args = [sys.executable, "-m", "pipeline", "run", str(path), *address]
    if background:
        return subprocess.Popen(args, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(args, cwd=workdir, env=env, capture_output=True, text=True, timeout=900)


def _drafter(workdir: Path, experiment: str) -> tuple[dict, dict, dict]:
    """(the job's record, the stored drafter's tensors, its result) of the experiment's train_drafter job."""
    store = Store(f"sqlite:///{workdir / '.specfleet' / 'specfleet.db'}")
    try:
        experiment_id = next(e["id"] for e in store.experiments() if e["name"] == experiment)
        (job,) = [j for j in store.jobs(experiment_id) if j["kind"] == "train_drafter"]
        result = store.finished_result(job["job_hash"])
    finally:
        store.close()
    assert dir_hash(result["files_uri"]) == result["files_sha256"]  # the stored checkpoint is what was recorded
    tensors = {}
    for path in sorted(Path(result["files_uri"]).glob("*.safetensors")):
        tensors.update({f"{path.name}/{k}": v for k, v in safetensors.torch.load_file(path).items()})
    assert tensors
    return job, tensors, result


def _assert_same_drafter(a: dict, b: dict, atol: float = 2e-5) -> None:
    assert a.keys() == b.keys()
    worst = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
    assert worst <= atol, worst


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """One work folder: the target is trained once, and the one-process drafter is the reference."""
    folder = tmp_path_factory.mktemp("group")
    done = _run(folder, _spec("one", 12, {}))
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


def test_two_ddp_workers_on_two_nodes_train_the_one_process_drafter(workdir, ray_cluster):
    done = _run(workdir, _spec("ddp", 12, {"train_drafter": {"workers": 2, "num_cpus": 1}}), "--address", ray_cluster)
    assert done.returncode == 0, done.stderr[-3000:]
    job, ddp, _ = _drafter(workdir, "ddp")
    _, one, _ = _drafter(workdir, "one")
    _assert_same_drafter(ddp, one)
    assert (job["status"], job["attempts"]) == ("done", 1)
    client = MlflowClient(f"sqlite:///{workdir / '.specfleet' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("specfleet/ddp")
    runs = client.search_runs([exp.experiment_id], f"tags.`specfleet.job_hash` = '{job['job_hash']}'")
    assert len(runs) == 1 and runs[0].data.metrics["train_loss"] > 0  # one run, the group's loss


def test_two_sharded_workers_on_two_nodes_train_the_one_process_drafter(workdir, ray_cluster):
    resources = {"train_drafter": {"workers": 2, "num_cpus": 1, "sharding": "fsdp"}}
    done = _run(workdir, _spec("fsdp", 12, resources), "--address", ray_cluster)
    assert done.returncode == 0, done.stderr[-3000:]
    job, fsdp, _ = _drafter(workdir, "fsdp")
    _, one, _ = _drafter(workdir, "one")
    _assert_same_drafter(fsdp, one)
    assert (job["status"], job["attempts"]) == ("done", 1)


def _registered(storage: Path) -> bool:
    """Whether Ray Train has registered a checkpoint of the run (its manager's snapshot names one)."""
    for snapshot in storage.glob("*/checkpoint_manager_snapshot.json"):
        try:
            if "checkpoint_" in snapshot.read_text():
                return True
        except OSError:
            pass
    return False


def test_a_worker_killed_mid_training_is_survived_from_the_last_checkpoint(workdir, tmp_path):
    import psutil

    storage = tmp_path / "train-storage"  # where the group's checkpoints go (SPECFLEET_TRAIN_STORAGE)
    resources = {"train_drafter": {"workers": 2, "num_cpus": 1}}
    driver = _run(
        workdir, _spec("killed", 40, resources), env={"SPECFLEET_TRAIN_STORAGE": str(storage)}, background=True
    )
    killed = None
    deadline = time.monotonic() + 600
    while driver.poll() is None and time.monotonic() < deadline and killed is None:
        if _registered(storage):  # the group's first checkpoint is registered: kill a worker
            for proc in psutil.process_iter(["cmdline"]):
                if "RayTrainWorker" in " ".join(proc.info["cmdline"] or []):
                    proc.kill()
                    killed = proc.pid
                    break
        time.sleep(0.2)
    out, err = driver.communicate(timeout=900)
    assert killed is not None, "no worker was killed: " + err[-2000:]
    assert driver.returncode == 0, err[-3000:]
    job, survived, result = _drafter(workdir, "killed")
    assert (job["status"], job["attempts"]) == ("done", 1)  # recorded once
    assert result["metrics"]["resumed_at_step"] > 0  # the new group continued from a checkpoint, not from step 1
    steps = [step for step, _ in result["history"]["train_loss"]]
    assert steps == sorted(set(steps)) and steps[-1] == 40  # the steps it repeated were shown once
    # the same training, unbroken, in one process (the group's equal: the tests above)
    again = _run(workdir, _spec("unbroken", 40, {}))
    assert again.returncode == 0, again.stderr[-3000:]
    _, unbroken, _ = _drafter(workdir, "unbroken")
    _assert_same_drafter(survived, unbroken)
    assert not any(storage.iterdir())  # the group's checkpoints went when the job ended
