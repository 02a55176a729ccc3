"""The Ray cluster the executor runs jobs on by default (the only ray import).

Jobs run as Ray tasks with the resources their kind asks for; a job's inputs are passed as
object refs, so Ray starts it when its dependencies are done and moves their results to
whichever node runs it. Results are small: files travel by reference (pipeline/core/artifacts.py),
each node fetching what its jobs read.

A job's Ray task is retried once when its worker process dies (a node lost, the OOM killer);
the job is still recorded once. The tests SIGKILL a worker mid-job on a two-node cluster.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from dataclasses import dataclass, field

import ray

from pipeline.errors import UserError
from pipeline.run.resources import fit_on_nodes
from pipeline.run.worker_code import with_code


@ray.remote(num_cpus=0)
class ProgressBoard:
    """Workers report 'started' and training steps here; the driver polls a snapshot."""

    def __init__(self):
        self.state: dict[str, dict] = {}

    def started(self, job_hash: str) -> None:
        self.state.setdefault(job_hash, {})["started"] = time.time()

    def step(self, job_hash: str, step: int, total: int, loss: float) -> None:
        self.state.setdefault(job_hash, {}).update(step=step, total=total, loss=loss)

    def snapshot(self) -> dict:
        return self.state


@ray.remote(num_returns=2)
def _run_job(runner, kind, config, num_cpus, num_gpus, job_hash, checkpoints, board, dep_names, *dep_values):
    """(the job's result, what it logged on the worker). runner: "module:function", the worker entry point."""
    board.started.remote(job_hash)  # first, so any failure below is this job's own
    import socket

    from pipeline.core.kinds import resolve
    from workers.runtime.joblog import captured

    run_job = resolve(runner)

    last = [0.0]

    def progress(step: int, total: int, loss: float) -> None:
        now = time.monotonic()
        if now - last[0] > 0.5 or step == total:
            last[0] = now
            board.step.remote(job_hash, step, total, loss)

    inputs = dict(zip(dep_names, dep_values))
    with captured(f"{kind} {job_hash[:12]} on {socket.gethostname()}") as log:
        result = run_job(
            kind,
            config,
            inputs,
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            progress=progress,
            checkpoints=checkpoints,
            job_hash=job_hash,
        )
    return result, log()


@ray.remote
def _worker_env(num_gpus):
    from workers.runtime.environment import worker_env

    return worker_env(num_gpus)


@dataclass
class RayCluster:
    """The executor's cluster (pipeline/run/executor.py) on Ray: one task per job."""

    started_here: bool
    address: str
    board: object = None
    logs: dict = field(default_factory=dict)  # result ref -> the ref of what the job logged
    runner: str = "workers.jobs.run:run_job"  # what runs a job on a worker (the fleet simulation's instant jobs)

    def submit(self, job, deps: dict, checkpoints: str):
        """deps: input name -> object ref (or value); checkpoints: where the job stores its files.
        Returns the job's result ref."""
        names = tuple(deps)
        placed = {"accelerator_type": job.accelerator_type} if job.accelerator_type else {}
        result, log = _run_job.options(
            num_cpus=job.num_cpus,
            num_gpus=job.num_gpus,
            name=job.name,
            max_retries=1,
            retry_exceptions=False,
            **placed,
        ).remote(
            self.runner,
            job.kind,
            job.config,
            job.num_cpus,
            job.num_gpus,
            job.hash,
            checkpoints,
            self.board,
            names,
            *deps.values(),
        )
        self.logs[result] = log  # dependents take the result; the driver reads the log when recording
        return result

    def put(self, value):
        return ray.put(value)

    def probe(self, num_cpus: float, num_gpus: float, accelerator_type: str | None):
        """What a worker placed like this reports (workers/runtime/environment.py): the timing jobs' identity."""
        placed = {"accelerator_type": accelerator_type} if accelerator_type else {}
        try:
            return ray.get(_worker_env.options(num_cpus=num_cpus, num_gpus=num_gpus, **placed).remote(num_gpus))
        except ray.exceptions.RayError as exc:
            cause = getattr(exc, "cause", None) or exc
            raise UserError(
                f"resources.profile_cost: a worker placed like the timing jobs could not report itself: "
                f"{type(cause).__name__}: {next(iter(str(cause).splitlines()), '')}"
            ) from None

    def wait(self, refs: list, timeout: float):
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout, fetch_local=False)
        return done

    def get(self, ref):
        return ray.get(ref)

    def log(self, ref) -> str | None:
        """What the job behind a finished result ref logged on its worker (None for a reused one)."""
        log_ref = self.logs.get(ref)
        return None if log_ref is None else ray.get(log_ref)

    def progress(self) -> dict:
        return ray.get(self.board.snapshot.remote())

    def cancel(self, refs: list) -> None:
        for ref in refs:
            ray.cancel(ref, force=True)

    def elsewhere(self) -> int:
        """Alive nodes whose address is not this driver's (a cluster on one machine has none)."""
        here = ray.util.get_node_ip_address()
        return sum(1 for n in ray.nodes() if n.get("Alive") and n.get("NodeManagerAddress") != here)

    def close(self) -> None:
        if self.started_here and ray.is_initialized():
            ray.shutdown()

    def check_resources(self, requests: dict[str, tuple[float, float, str | None]], groups: dict | None = None) -> str:
        return check_resources(requests, groups)


def connect(address: str | None, runtime_env: dict | None = None) -> RayCluster:
    """Join `address` (or RAY_ADDRESS), or start a local cluster in this process on loopback; either
    way the workers run this process's specfleet code (pipeline/run/worker_code.py).
    runtime_env: what Ray gives every worker process besides that code (pipeline/run/runtime_env.py)."""
    address = address or os.environ.get("RAY_ADDRESS")
    runtime_env = dict(runtime_env or {})
    if address and address.startswith(("http://", "https://")):
        raise UserError(
            f"--address/RAY_ADDRESS: {address} is the cluster's Jobs API: submit the run through it "
            f"(ray job submit --address {address} --working-dir . -- python -m pipeline run SPEC), or "
            "join the cluster at its GCS address (HEAD:6379)"
        )
    if ray.is_initialized():
        cluster = RayCluster(started_here=False, address="(already connected)")
    elif address:
        unreachable = _unreachable(address)
        if unreachable:  # Ray itself would keep trying for minutes
            raise UserError(f"--address: cannot join Ray cluster at {address}: {unreachable}")
        # specfleet's own code travels (as folders: a submitted job's own runtime_env is merged with
        # it); the nodes bring torch and the other dependencies
        try:
            ray.init(address=address, log_to_driver=False, runtime_env=with_code(runtime_env))
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise UserError(f"--address: cannot join Ray cluster at {address}: {_why(exc)}") from None
        cluster = RayCluster(started_here=False, address=address)
    else:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        _run_token()
        # address="local": always a new cluster of this process's own, on loopback, never one a
        # `ray start` or a stale session record on this machine points at
        ray.init(
            address="local",
            num_cpus=os.cpu_count(),
            include_dashboard=False,
            log_to_driver=False,
            _node_ip_address="127.0.0.1",
            configure_logging=False,
            runtime_env=with_code(runtime_env),  # as on a joined cluster: never the started-in folder's
        )
        cluster = RayCluster(started_here=True, address="local")
    cluster.board = ProgressBoard.remote()
    return cluster


def _unreachable(address: str) -> str | None:
    """Why nothing could answer at a HOST:PORT address (None when something listens there, or the
    address is another form, "auto" or "ray://...", that Ray resolves itself)."""
    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return None
    host = host.strip("[]")  # [::1]:6379
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as exc:
        return f"nothing answers at {host}:{port} ({exc.strerror or type(exc).__name__})"
    return None


def _why(exc: BaseException) -> str:
    """One line on why joining failed; a token refusal (Ray puts it in the cause) says what to set."""
    text = " ".join(str(e) for e in (exc, exc.__cause__, exc.__context__) if e is not None)
    if "InvalidAuthToken" in text or "AuthenticationError" in text or "authentication token" in text.lower():
        return (
            "the cluster uses token authentication and refused this one: set RAY_AUTH_MODE=token and the "
            "cluster's token in RAY_AUTH_TOKEN or a file named by RAY_AUTH_TOKEN_PATH"
        )
    return next(iter(str(exc).splitlines()), type(exc).__name__)


def _run_token() -> None:
    """The local cluster's token: Ray turns its token authentication on for a new local cluster
    (every process that talks to it must present the token); unless the user gave a token, it is
    a new one of this run's, held in this process's environment (which the cluster's processes
    inherit), never written to disk. A user's RAY_AUTH_MODE (disabled, token) is kept."""
    if os.environ.get("RAY_AUTH_MODE", "token").lower() == "token" and not (
        os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
    ):
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)


def check_resources(requests: dict[str, tuple[float, float, str | None]], groups: dict | None = None) -> str:
    """Refuse requests no single alive node, nor any node the autoscaler can add, can satisfy, and
    groups of workers the nodes cannot hold at once (Ray would wait forever for them)."""
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    return fit_on_nodes(requests, nodes, autoscaler_node_types(), groups)


def autoscaler_node_types() -> list[dict] | None:
    """The resources of each node type the cluster's autoscaler can add; [] when an autoscaler runs
    but does not publish its node types; None when the cluster has no autoscaler (or Ray's state
    does not say: then only the nodes there count)."""
    try:
        from ray._private.state import state

        config = state.get_cluster_config()  # published by the platform that manages the cluster, if any
        if config is not None and config.node_group_configs:
            types = [
                dict(g.resources)
                for g in config.node_group_configs
                if g.resources and g.max_count != 0 and (g.max_count == -1 or g.max_count > g.min_count)
            ]
            return types or None  # fixed-size groups only: nothing will be added
        from ray.autoscaler.v2.utils import is_autoscaler_v2

        if is_autoscaler_v2(fetch_from_server=True):
            return []
        from ray._private.ray_constants import DEBUG_AUTOSCALING_STATUS
        from ray.experimental.internal_kv import _internal_kv_get

        raw = _internal_kv_get(DEBUG_AUTOSCALING_STATUS)
        report = json.loads(raw).get("autoscaler_report", {}) if raw else {}
        types = {t for key in ("active_nodes", "idle_nodes", "pending_launches") for t in report.get(key) or {}}
        # a v1 autoscaler names nodes by their type; with none, Ray's read-only monitor names each node_<id>
        if types and not all(t.startswith("node_") for t in types):
            return []
    except Exception:  # noqa: BLE001 - Ray's private state API moved: judge by the nodes there
        return None
    return None
