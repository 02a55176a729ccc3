"""What the executor (pipeline/run/executor.py) asks of a cluster: submit a job with its inputs,
wait for results, cancel, report progress. pipeline/run/ray_cluster.py implements it on Ray,
pipeline/run/local_cluster.py in this process, one job after another."""

from __future__ import annotations

from typing import Protocol

from pipeline.plan import Job


class Cluster(Protocol):
    address: str

    # kind -> (cpus, gpus, accelerator) of one job (of one worker, for a kind run on groups);
    # groups: kind -> workers, for the kinds run on groups of workers
    def check_resources(
        self, requests: dict[str, tuple[float, float, str | None]], groups: dict | None = None
    ) -> str: ...
    # deps: input name -> ref; checkpoints: the store the job puts its files in (pipeline/core/artifacts.py);
    # returns the result's ref
    def submit(self, job: Job, deps: dict, checkpoints: str): ...
    def put(self, value): ...  # a ref to a value already known (a reused result)
    def wait(self, refs: list, timeout: float) -> list: ...  # the refs that are done
    def get(self, ref): ...  # the result, or the job's exception
    def log(self, ref) -> str | None: ...  # what the job logged on its worker, if kept
    def progress(self) -> dict[str, dict]: ...  # job hash -> {"started": ..., "step": ...}
    def cancel(self, refs: list) -> None: ...
    def close(self) -> None: ...
    def elsewhere(self) -> int: ...  # alive nodes on other machines than this driver's
