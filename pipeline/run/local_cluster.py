"""An in-process cluster: the executor's jobs run one after another in this process, no Ray.

It keeps Ray's contract as the executor sees it: a job runs once its inputs are done, a job
whose input failed never starts and raises its input's error, `progress()` lists the jobs that
started, `cancel` stops jobs that have not run. Jobs run lazily, one per `wait` call, in
submission order (dependencies first), so the executor's polling loop, its recording and its
failure and interrupt paths run exactly as they do on Ray.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.errors import ResourceError
from pipeline.run.resources import fit_on_nodes


@dataclass(eq=False)
class LocalRef:
    job: object | None = None
    deps: dict = field(default_factory=dict)
    checkpoints: str = ""
    value: object = None
    error: BaseException | None = None
    done: bool = False


def default_runner(kind, config, inputs, *, num_cpus, num_gpus, progress, checkpoints, job_hash):
    from workers.jobs.run import run_job  # torch, only once a job actually runs

    return run_job(
        kind,
        config,
        inputs,
        num_cpus=num_cpus,
        num_gpus=num_gpus,
        progress=progress,
        checkpoints=checkpoints,
        job_hash=job_hash,
    )


class LocalCluster:
    """`runner(kind, config, inputs, *, num_cpus, num_gpus, progress, checkpoints, job_hash)` runs one
    job (default: the real worker entry point, which stores its files in `checkpoints`). `cpus`
    and `gpus` are what this one node offers."""

    def __init__(self, runner: Callable = default_runner, *, cpus: float | None = None, gpus: float = 0):
        self.runner = runner
        self.cpus = float(cpus if cpus is not None else os.cpu_count() or 1)
        self.gpus = float(gpus)
        self.address = "in-process"
        self.queue: list[LocalRef] = []
        self.board: dict[str, dict] = {}
        self.closed = False

    def check_resources(self, requests: dict[str, tuple[float, float, str | None]], groups: dict | None = None) -> str:
        for kind in sorted(groups or {}):
            raise ResourceError(
                f"resources.{kind}.workers: a group of workers trains on Ray (Ray Train); this "
                "in-process cluster runs one job at a time in one process: set workers: 1"
            )
        return fit_on_nodes(requests, [{"CPU": self.cpus, "GPU": self.gpus}])

    def submit(self, job, deps: dict, checkpoints: str) -> LocalRef:
        ref = LocalRef(job=job, deps=dict(deps), checkpoints=checkpoints)
        self.queue.append(ref)
        return ref

    def put(self, value) -> LocalRef:
        return LocalRef(value=value, done=True)

    def wait(self, refs: list, timeout: float) -> list:
        if self.queue and not any(r.done for r in refs):
            self._run(self.queue.pop(0))
        return [r for r in refs if r.done]

    def get(self, ref: LocalRef):
        if ref.error is not None:
            raise ref.error
        return ref.value

    def log(self, ref: LocalRef) -> None:
        """In process, a job's output is this process's own: nothing is kept apart."""
        return None

    def progress(self) -> dict[str, dict]:
        return {h: dict(state) for h, state in self.board.items()}

    def cancel(self, refs: list) -> None:
        for ref in refs:
            if not ref.done:
                ref.error, ref.done = RuntimeError("cancelled"), True
                if ref in self.queue:
                    self.queue.remove(ref)

    def elsewhere(self) -> int:
        return 0

    def close(self) -> None:
        self.closed = True

    def _run(self, ref: LocalRef) -> None:
        job = ref.job
        failed = next((d for d in ref.deps.values() if d.error is not None), None)
        if failed is not None:  # like Ray: the input's error, and the job never starts
            ref.error, ref.done = failed.error, True
            return
        self.board[job.hash] = {"started": time.time()}

        def progress(step: int, total: int, loss: float) -> None:
            self.board[job.hash].update(step=step, total=total, loss=loss)

        inputs = {name: dep.value for name, dep in ref.deps.items()}
        try:
            ref.value = self.runner(
                job.kind,
                job.config,
                inputs,
                num_cpus=job.num_cpus,
                num_gpus=job.num_gpus,
                progress=progress,
                checkpoints=ref.checkpoints,
                job_hash=job.hash,
            )
        except Exception as exc:  # the job's own failure; KeyboardInterrupt goes to the executor
            ref.error = exc
        ref.done = True
