"""Training one drafter over a group of processes (torch.distributed on gloo, as Ray Train's workers
run it on CPUs): data parallel and sharded training give the drafter one process gives at the same
global batch, and a run stopped mid-way and continued from its last saved state ends where an
unbroken run ends."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pipeline.core import contracts as c
from pipeline.core.model_settings import Eagle3DrafterSpec, MtpDrafterSpec
from tests.conftest import build_tiny_target, free_port
from workers.jobs.train_drafter import train_here
from workers.runtime.replicas import ONE_PROCESS, Replicas, Resume

pytestmark = pytest.mark.slow

TRAIN = {"steps": 6, "lr": 3e-3, "batch_size": 4, "seq_len": 32, "corpus": "stdlib"}
DRAFTERS = {
    "eagle3": lambda: Eagle3DrafterSpec(name="e", norm="post", fc_norm=True, train={**TRAIN, "ttt_depth": 2}),
    "mtp": lambda: MtpDrafterSpec(name="m", kind="mtp", recipe="recursive", train={**TRAIN, "ttt_depth": 2}),
}


class Stop(Exception):
    """A worker lost after a step (the test's stand-in for a killed process)."""


def _config(kind: str, group: dict | None = None) -> c.TrainDrafterConfig:
    return c.TrainDrafterConfig(
        seed=0, device="cpu", target=c.TargetRef(name="t"), drafter=DRAFTERS[kind](), group=group
    )


def _resume(folder: Path, stop_after: int | None) -> Resume:
    """Saves every 2 steps to a file, as Ray Train keeps a checkpoint; raises Stop after step stop_after."""

    def save(step: int, state):
        if state is not None:
            torch.save(state, folder / "state.pt")
        if dist.is_initialized():
            dist.barrier()
        if step == stop_after:
            raise Stop(step)

    def latest():
        path = folder / "state.pt"
        return torch.load(path, weights_only=True) if path.exists() else None

    return Resume(every=2, save=save, latest=latest)


def _train(rank: int, world: int, kind: str, sharding: str, port: int, folder: str, stop_after, files):
    """One worker (or the one process): trains, and rank 0 writes the drafter's files' tensors."""
    torch.set_num_threads(1)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
        dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        replicas = Replicas(rank, world, sharding) if world > 1 else ONE_PROCESS
        group = {"workers": world, "sharding": sharding, "num_cpus": 1, "num_gpus": 0} if world > 1 else None
        inputs = {"target": c.Trained(metrics={}, files=files)}
        resume = _resume(Path(folder), stop_after)
        try:
            out, metrics = train_here(
                _config(kind, group), inputs, num_gpus=0, progress=None, replicas=replicas, resume=resume
            )
        except Stop:
            return
        if rank == 0:
            torch.save({"files": out, "metrics": metrics}, Path(folder) / "result.pt")
    finally:
        if world > 1:
            dist.destroy_process_group()


def _run(tmp_path: Path, name: str, kind: str, world: int, sharding: str = "ddp", stop_after=None, fresh=True):
    folder = tmp_path / name
    if fresh:
        folder.mkdir()
    _, _, files = build_tiny_target()  # the tiny target's files, made once (cached) and handed to each worker
    args = (world, kind, sharding, free_port(), str(folder), stop_after, files)
    if world == 1:
        _train(0, *args)
    else:
        mp.spawn(_train, args=args, nprocs=world, join=True)
    path = folder / "result.pt"
    return torch.load(path, weights_only=False) if path.exists() else None


def _weights(result) -> dict[str, torch.Tensor]:
    import safetensors.torch

    return {
        f"{name}/{key}": tensor
        for name, blob in result["files"].items()
        if name.endswith(".safetensors")
        for key, tensor in safetensors.torch.load(blob).items()
    }


def _assert_close(a, b, atol):
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys() and wa
    worst = max((wa[k].float() - wb[k].float()).abs().max().item() for k in wa)
    assert worst <= atol, worst
    return worst


@pytest.mark.parametrize("kind", ["eagle3", pytest.param("mtp", marks=pytest.mark.long)])
def test_data_parallel_and_sharded_training_give_the_one_process_drafter(tmp_path, kind):
    one = _run(tmp_path, "one", kind, 1)
    ddp = _run(tmp_path, "ddp", kind, 2, "ddp")
    fsdp = _run(tmp_path, "fsdp", kind, 2, "fsdp")
    # windows of a built-in corpus: every row carries a loss at every position, so the mean of the
    # workers' means is the global batch's mean
    _assert_close(ddp, one, atol=2e-5)
    _assert_close(fsdp, one, atol=2e-5)
    # the training loss reported is the group's (the mean of its workers' halves)
    assert ddp["metrics"]["train_loss"] == pytest.approx(one["metrics"]["train_loss"], rel=1e-4)


@pytest.mark.parametrize(
    "world,sharding",
    [(1, "ddp"), pytest.param(2, "ddp", marks=pytest.mark.long), pytest.param(2, "fsdp", marks=pytest.mark.long)],
)
def test_a_run_continued_from_its_last_saved_state_ends_where_an_unbroken_run_ends(tmp_path, world, sharding):
    whole = _run(tmp_path, "whole", "eagle3", world, sharding)
    assert _run(tmp_path, "broken", "eagle3", world, sharding, stop_after=4) is None  # lost after step 4
    saved = torch.load(tmp_path / "broken" / "state.pt", weights_only=True)
    assert saved["step"] == 4
    final = {k.partition("/")[2]: v for k, v in _weights(whole).items()}
    moved = [k for k, v in saved["drafter"].items() if k in final and not torch.equal(v, final[k].to(v.dtype))]
    assert moved  # steps 5 and 6 still changed the drafter
    continued = _run(tmp_path, "broken", "eagle3", world, sharding, fresh=False)  # steps 5 and 6 only
    _assert_close(continued, whole, atol=1e-6)
