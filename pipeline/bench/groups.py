"""Drafter training on groups of Ray Train workers against one process, for `specfleet bench`.

The bench experiment's own drafter job is trained again, for a few steps, four ways on the same
CPUs: in this process (the job without a group), and as groups of 1 and 2 DDP workers and 2
FSDP workers (workers/runtime/ray_train.py), each group given the CPUs shared out. tokens/s is
the training loop's (the global batch's tokens over rank 0's loop seconds); the wall time adds
what a group costs around it: starting the workers, loading the target, the checkpoints. On a
machine of 2 cores more workers cannot be faster; the table shows what the group's plumbing
costs, and the held-out loss shows each layout trained the same drafter.
"""

from __future__ import annotations

import time

from pipeline.core.contracts import TrainDrafterConfig, WorkerGroup

LAYOUTS = ((None, None), (1, "ddp"), (2, "ddp"), (2, "fsdp"))  # (workers, sharding); None: no group


def group_training_speed(config: TrainDrafterConfig, inputs: dict, *, steps: int, cpus: int, log) -> list[dict]:
    """One row per layout: tokens/s in the loop, wall seconds, held-out loss. Starts a local Ray
    cluster for the groups (pipeline/run/ray_cluster.py) and stops it."""
    import torch

    from pipeline.run.ray_cluster import connect
    from workers.jobs.train_drafter import train_here
    from workers.runtime.ray_train import train_in_group

    train = config.drafter.train.model_copy(update={"steps": steps})
    base = config.model_copy(update={"drafter": config.drafter.model_copy(update={"train": train})})
    cluster = connect(None)
    rows = []
    try:
        for workers, sharding in LAYOUTS:
            label = "one process" if workers is None else f"{workers} {sharding} worker{'s' * (workers > 1)}"
            log(f"bench: drafter training, {label}, {steps} steps")
            t0 = time.perf_counter()
            if workers is None:
                threads = torch.get_num_threads()
                torch.set_num_threads(cpus)
                try:
                    _, metrics = train_here(base, inputs, num_gpus=0, progress=None)
                finally:
                    torch.set_num_threads(threads)
            else:
                group = WorkerGroup(workers=workers, sharding=sharding, num_cpus=cpus / workers, num_gpus=0)
                grouped = base.model_copy(update={"group": group})
                _, metrics = train_in_group(grouped, inputs, run_name=f"bench-{workers}-{sharding}-{time.time_ns()}")
            rows.append(
                {
                    "layout": label,
                    "workers": workers or 1,
                    "sharding": sharding,
                    "cpus_per_worker": cpus / (workers or 1),
                    "tokens_per_s": metrics["tokens_seen"] / (metrics["train_seconds"] - metrics["checkpoint_seconds"]),
                    "train_seconds": metrics["train_seconds"],
                    "checkpoint_seconds": metrics["checkpoint_seconds"],
                    "wall_seconds": time.perf_counter() - t0,
                    "val_loss": metrics["val_loss"],
                }
            )
    finally:
        cluster.close()
    return rows
