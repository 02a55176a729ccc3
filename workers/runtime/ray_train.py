"""A training job on a group of Ray Train workers: a `TorchTrainer` started from the job's own Ray
task, on the cluster that task runs on.

Each worker runs the job's training alike (workers/runtime/replicas.py says how the batch, the
gradients and, sharded, the parameters are split), with the resources the spec gives each worker;
the job's own task holds none and waits. Every `checkpoint_every` steps, and after the last, rank
0 reports the run's whole state (the drafter's trained weights, the optimizer, the generators'
states and the step) as a Ray Train checkpoint. A worker lost mid-training (its process killed,
its node gone) makes Ray Train stop the group and start a new one, up to MAX_FAILURES times; the
new workers continue from the last checkpoint, so the result is the one an unbroken run gives.
Rank 0's trained files come back to the job's task, which stores them as every job does.

Ray Train keeps those checkpoints under `storage_root()`: SPECFLEET_TRAIN_STORAGE, which on a
cluster of several machines must be storage every node reaches (a shared folder, s3://, gs://),
else a folder in this machine's temporary directory (enough for a cluster on one machine). The
run is named after the job's hash, so a retried job task continues it too; its folder is removed
when the job ends.

On GPUs the group talks over NCCL, on CPUs over gloo.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

MAX_FAILURES = 2  # worker groups lost per job before it fails
STATE = "state.pt"
_QUIET = {  # what Ray Train would otherwise start or record for every run
    "RAY_TRAIN_METRICS_ENABLED": "0",
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    "RAY_TRAIN_ENABLE_CONTROLLER_STRUCTURED_LOGGING": "0",
    "RAY_TRAIN_ENABLE_WORKER_STRUCTURED_LOGGING": "0",
    "RAY_CHDIR_TO_TRIAL_DIR": "0",
}


def storage_root() -> str:
    """Where Ray Train keeps a group's checkpoints while the job runs."""
    given = os.environ.get("SPECFLEET_TRAIN_STORAGE")
    if given:
        return given if "://" in given else str(Path(given).resolve())
    return str(Path(tempfile.gettempdir()) / "specfleet-train")


def checkpoint_every(steps: int) -> int:
    """Steps between two checkpoints of a run of `steps`: ten a run, at most."""
    return max(1, steps // 10)


def train_in_group(config, inputs: dict, *, run_name: str, progress=None):
    """Run `config` (a TrainDrafterConfig with a `group`) on its workers. Returns (files, metrics)
    as rank 0 trained them; progress gets rank 0's steps once the group is done."""
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig, TrainingFailedError
    from ray.train.torch import TorchConfig, TorchTrainer

    group = config.group
    per_worker = {"CPU": group.num_cpus, **({"GPU": group.num_gpus} if group.num_gpus else {})}
    env = dict(_QUIET)
    if ray.util.get_node_ip_address() == "127.0.0.1":  # a cluster on loopback: its collectives stay there
        env["GLOO_SOCKET_IFNAME"] = "lo"
    os.environ.update(_QUIET)
    storage = storage_root()
    trainer = TorchTrainer(
        _worker_loop,
        train_loop_config={"config": config, "inputs": inputs},
        torch_config=TorchConfig(backend="nccl" if group.num_gpus else "gloo"),
        scaling_config=ScalingConfig(
            num_workers=group.workers,
            use_gpu=group.num_gpus > 0,
            resources_per_worker=per_worker,
            accelerator_type=group.accelerator_type,
        ),
        run_config=RunConfig(
            name=run_name,
            storage_path=storage,
            failure_config=FailureConfig(max_failures=MAX_FAILURES, controller_failure_limit=1),
            worker_runtime_env={"env_vars": env},
        ),
    )
    interrupt = signal.getsignal(signal.SIGINT)  # Ray Train sets its own and leaves it
    try:
        result = trainer.fit()
    except TrainingFailedError as exc:
        raise RuntimeError(f"train_drafter on {group.workers} workers failed: {_first_failure(exc)}") from None
    finally:
        signal.signal(signal.SIGINT, interrupt)
        if "://" not in storage:
            shutil.rmtree(Path(storage) / run_name, ignore_errors=True)
    files, metrics, history = result.return_value
    for step, total, loss in history if progress is not None else ():
        progress(step, total, loss)
    return files, metrics


def _first_failure(exc) -> str:
    failures = getattr(exc, "worker_failures", None) or {}
    for rank, error in sorted(failures.items()):
        return f"rank {rank}: {type(error).__name__}: {next(iter(str(error).splitlines()), '')}"
    return f"{type(exc).__name__}: {next(iter(str(exc).splitlines()), '')}"


def _worker_loop(loop_config: dict):
    """One worker of the group: the job's training with this worker's place in it. Rank 0 returns
    (files, metrics, its steps as (step, total, loss)); the others None."""
    import ray.train
    import torch

    from workers.jobs.train_drafter import train_here
    from workers.runtime.replicas import Replicas, Resume

    config, inputs = loop_config["config"], loop_config["inputs"]
    context = ray.train.get_context()
    replicas = Replicas(context.get_world_rank(), context.get_world_size(), config.group.sharding)
    torch.set_num_threads(max(1, int(config.group.num_cpus)))
    torch.manual_seed(config.seed)
    history: list[tuple[int, int, float]] = []

    every = checkpoint_every(config.drafter.train.steps)

    def progress(step: int, total: int, loss: float) -> None:
        if replicas.rank == 0:
            history.append((step, total, loss))
            if step % every == 0 or step == total:  # the worker's log
                print(f"train_drafter rank 0: step {step}/{total}, loss {loss:.4f}", flush=True)

    resume = Resume(every=every, save=_save, latest=_latest)
    files, metrics = train_here(
        config, inputs, num_gpus=config.group.num_gpus, progress=progress, replicas=replicas, resume=resume
    )
    return (files, metrics, history) if replicas.rank == 0 else None


def _save(step: int, state: dict | None) -> None:
    """Report step `step` to Ray Train, with the run's state where this worker has it (rank 0)."""
    import ray.train
    import torch
    from ray.train import Checkpoint

    with tempfile.TemporaryDirectory() as folder:
        checkpoint = None
        if state is not None:
            torch.save(state, Path(folder) / STATE)
            checkpoint = Checkpoint.from_directory(folder)
        ray.train.report({"step": step}, checkpoint=checkpoint)  # every rank: a barrier


def _latest() -> dict | None:
    """The state of the last checkpoint the group reported before it was restarted, if any."""
    import ray.train
    import torch

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as folder:
        return torch.load(Path(folder) / STATE, map_location="cpu", weights_only=True)
