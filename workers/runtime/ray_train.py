"""A training job on a group of Ray Train workers: a `TorchTrainer` started from the job's own Ray
task, on the cluster that task runs on.

Each worker runs the job's training alike (workers/runtime/replicas.py says how the batch, the
gradients and, sharded, the parameters are split), with the resources the spec gives each worker;
the job's own task holds none and waits. Every `checkpoint_every` steps, and after the last, rank
0 reports the run's whole state (the drafter's trained weights, the optimizer, the generators'
states and the step) as a Ray Train checkpoint. A worker lost mid-training (its process killed,
its node gone) makes Ray Train stop the group and start a new one, up to MAX_FAILURES times; the
new workers continue from the last checkpoint, so the result is the one an unbroken run gives.
Rank 0's trained files come back to the job's task, which stores them as every job does. Rank 0's
steps reach the job's progress while the group trains (through a Ray queue, a batch every half
second), each step once: a group restarted from a checkpoint repeats steps already shown, and
those are not shown again.

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
import threading
import time
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
    as rank 0 trained them; progress gets rank 0's steps as they are trained."""
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
    relay = _Relay(progress) if progress is not None else None
    interrupt = signal.getsignal(signal.SIGINT)  # Ray Train sets its own and leaves it
    try:
        trainer = TorchTrainer(
            _worker_loop,
            train_loop_config={"config": config, "inputs": inputs, "steps": relay.steps if relay else None},
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
        result = trainer.fit()
    except TrainingFailedError as exc:
        raise RuntimeError(f"train_drafter on {group.workers} workers failed: {_first_failure(exc)}") from None
    finally:
        signal.signal(signal.SIGINT, interrupt)
        if "://" not in storage:
            shutil.rmtree(Path(storage) / run_name, ignore_errors=True)
        if relay is not None:
            relay.close()
    return result.return_value


class _Relay:
    """Rank 0's steps on their way to the job's `progress`: a Ray queue on the job task's node (a
    worker node lost takes no step with it), and a thread of the job task that hands each batch to
    `progress`, each step once and in order, until closed (then what is left in the queue too).
    Progress is best-effort: a queue that fails ends the showing, never the training."""

    def __init__(self, progress, steps=None):
        self.steps = steps if steps is not None else _queue_here()
        self.progress, self.last = progress, 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="train-group-steps", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from ray.util.queue import Empty

        while not self.done.is_set():
            try:
                self._show(self.steps.get(timeout=0.5))
            except Empty:
                continue
            except Exception:  # noqa: BLE001 - the queue is gone: nothing more to show
                return

    def _show(self, batch) -> None:
        for step, total, loss in batch:
            if step > self.last:  # a restarted group repeats the steps after its checkpoint
                self.last = step
                self.progress(step, total, loss)

    def close(self) -> None:
        self.done.set()
        self.thread.join()
        try:
            while True:
                self._show(self.steps.get_nowait())
        except Exception:  # noqa: BLE001 - Empty, or a queue that is gone
            pass
        try:
            self.steps.shutdown()
        except Exception:  # noqa: BLE001 - already gone
            pass


def _queue_here():
    """A Ray queue whose actor lives on this process's node."""
    import ray
    from ray.util.queue import Queue
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return Queue(actor_options={"num_cpus": 0, "scheduling_strategy": here})


def _first_failure(exc) -> str:
    failures = getattr(exc, "worker_failures", None) or {}
    for rank, error in sorted(failures.items()):
        return f"rank {rank}: {type(error).__name__}: {next(iter(str(error).splitlines()), '')}"
    return f"{type(exc).__name__}: {next(iter(str(exc).splitlines()), '')}"


def _worker_loop(loop_config: dict):
    """One worker of the group: the job's training with this worker's place in it. Rank 0 sends its
    steps as (step, total, loss) to the queue `steps` (when there is one), a batch every half second
    and the last at once, and returns (files, metrics); the others None."""
    import ray.train
    import ray.train.torch
    import torch

    from workers.jobs.train_drafter import train_here
    from workers.runtime.replicas import Replicas, Resume

    config, inputs, steps = loop_config["config"], loop_config["inputs"], loop_config["steps"]
    context = ray.train.get_context()
    replicas = Replicas(context.get_world_rank(), context.get_world_size(), config.group.sharding)
    torch.set_num_threads(max(1, int(config.group.num_cpus)))
    torch.manual_seed(config.seed)
    pending: list[tuple[int, int, float]] = []
    sent = [time.monotonic()]

    every = checkpoint_every(config.drafter.train.steps)

    def progress(step: int, total: int, loss: float) -> None:
        if replicas.rank != 0:
            return
        if step % every == 0 or step == total:  # the worker's log
            print(f"train_drafter rank 0: step {step}/{total}, loss {loss:.4f}", flush=True)
        if steps is None:
            return
        pending.append((step, total, loss))
        if step == total or time.monotonic() - sent[0] >= 0.5:
            try:
                steps.put(list(pending))
            except Exception:  # noqa: BLE001 - the job's queue is gone: train on without showing
                pass
            pending.clear()
            sent[0] = time.monotonic()

    resume = Resume(every=every, save=_save, latest=_latest)
    # this worker's own GPUs: the workers of a node see all of the node's (for NCCL), not cuda:0 alone
    devices = tuple(ray.train.torch.get_devices()) if config.group.num_gpus else None
    files, metrics = train_here(
        config,
        inputs,
        num_gpus=config.group.num_gpus,
        progress=progress,
        replicas=replicas,
        resume=resume,
        devices=devices,
    )
    return (files, metrics) if replicas.rank == 0 else None


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
