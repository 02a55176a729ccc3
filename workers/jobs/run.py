"""The entry point of every job on a worker: set up torch, run the kind's function, collect losses."""

from __future__ import annotations

import shutil

import torch

from pipeline.core.artifacts import publish, scratch
from pipeline.core.contracts import JobConfig, Stored, Trained
from pipeline.core.files import write_dir
from pipeline.core.kinds import kind as job_kind
from pipeline.core.kinds import resolve
from workers.runtime.environment import differences, worker_env


def run_job(
    kind: str,
    config: JobConfig,
    inputs: dict,
    *,
    num_cpus: float,
    num_gpus: float,
    progress=None,
    checkpoints: str | None = None,
    job_hash: str | None = None,
):
    """Run one job: `config` is the kind's typed config, `inputs` its inputs' typed results.

    Returns the kind's typed result; a training job's losses come back as history["train_loss"].
    With `checkpoints` (a store root, pipeline/core/artifacts.py) a result's files go there under
    `job_hash` and the result carries the reference; without, it carries the bytes.
    """
    spec = job_kind(kind)
    if not isinstance(config, spec.config):
        raise TypeError(f"{kind}: config must be {spec.config.__name__}, got {type(config).__name__}")
    for name, value in inputs.items():
        want = spec.inputs.get(name)
        if want is None or not isinstance(value, want):
            raise TypeError(f"{kind}: unexpected input {name!r} of type {type(value).__name__}")
    planned = getattr(config, "worker", None)  # a timing job: only where it was planned for
    here = worker_env(num_gpus) if planned is not None else None
    if here != planned:
        raise RuntimeError(
            f"{kind} was planned for another kind of worker than it landed on "
            f"({differences(planned, here)}): its timings would be stored for hardware "
            f"they were not taken on; pin resources.{kind}.accelerator_type to one GPU model"
        )
    torch.set_num_threads(max(1, int(num_cpus)))
    torch.manual_seed(config.seed)
    history: list[tuple[int, float]] = []

    def report(step: int, total: int, loss: float) -> None:
        if step % max(1, total // 100) == 0 or step == total:
            history.append((step, loss))
        if progress is not None:
            progress(step, total, loss)

    result = resolve(spec.run)(config, inputs, num_gpus=num_gpus, progress=report)
    if history and isinstance(result, Trained):
        result = result.model_copy(update={"history": {"train_loss": history}})
    if checkpoints is not None and isinstance(result, Stored) and result.files is not None:
        if job_hash is None:
            raise ValueError("run_job: storing a result's files needs the job's hash")
        work = scratch()
        try:
            result = result.by_reference(*publish(write_dir(result.files, work / "files"), checkpoints, job_hash))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return result
