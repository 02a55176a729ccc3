"""MLflow tracking: one parent run per experiment, one child run per job (the only mlflow import).

Runs are found again by tags (`specfleet.spec_hash`, `specfleet.job_hash`), so a rerun of an
unchanged spec reuses its runs instead of duplicating them.

MLflow params named like a secret are logged as `***` (db/secrets.py). Keys and run names longer
than MLflow keeps (250 characters: a metric named for a 255-character prompt category) are cut
to fit and end in a digest of the whole name, so two long names stay two keys (`fit`). MLflow calls ride out an
outage as the database's do (db/connection.py): retried with backoff for
`$SPECFLEET_MLFLOW_RETRY_S` seconds (default 60; `specfleet run --retry-s`), with MLflow's own
per-request retries, minutes long, turned off unless `MLFLOW_HTTP_REQUEST_MAX_RETRIES` is set.
The tests take an `mlflow server` (itself backed by PostgreSQL) away through a proxy mid-write
and bring it back, alone and together with the database mid-run: each write lands once.

Results are kept until recorded (pipeline/run/unrecorded.py): a job's result goes to the work
directory the moment it reaches the driver, its files already in the checkpoint store, before
anything is written to MLflow or the database, and the file is removed once the job is
recorded. A run ended by an outage longer than the retries (or by a kill) leaves it there, and
the next run records it instead of running the job again. The tests take the database, and
separately MLflow, away for good mid-run: the run ends with one error, and the next run
records the kept results, runs each job exactly once over both runs, and ends with stores
equal to an uninterrupted run's.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import time
from pathlib import Path

from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from db.secrets import MASK, is_secret_name, mask_secrets
from pipeline.errors import UserError

log = logging.getLogger(__name__)
TAG_SPEC = "specfleet.spec_hash"
TAG_JOB = "specfleet.job_hash"
TAG_KIND = "specfleet.kind"
PARENT_TAG = "mlflow.parentRunId"
MAX_PARAM = 6000  # MLflow's limit on a param value
MAX_KEY = 250  # MLflow's limit on a metric, param or tag key, and its runs table's name column


def fit(name: str, limit: int = MAX_KEY) -> str:
    """`name` when MLflow keeps it whole; else its head, '-' and 12 hex digits of the whole name's
    SHA-256, `limit` characters in all (names that share a head stay apart)."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    return f"{name[: limit - len(digest) - 1]}-{digest}"


def flatten(d: dict, prefix: str = "") -> dict[str, str]:
    """{'a': {'b': 1}} -> {'a.b': '1'}; lists are JSON."""
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            text = v if isinstance(v, str) else json.dumps(v)
            # a param is shown to everyone who can read the run
            out[fit(key)] = MASK if is_secret_name(str(k)) else mask_secrets(text)[:MAX_PARAM]
    return out


class Tracker:
    def __init__(self, tracking_uri: str, artifact_root: str | None = None, *, retry_s: float | None = None):
        """retry_s: how long a call waits out an unreachable store (default: $SPECFLEET_MLFLOW_RETRY_S,
        else 60). MLflow's own HTTP retries (minutes, per request) give way to that bound unless
        MLFLOW_HTTP_REQUEST_MAX_RETRIES is set."""
        self.uri = tracking_uri
        self.retry_s = retry_s if retry_s is not None else float(os.environ.get("SPECFLEET_MLFLOW_RETRY_S", 60))
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
        self.artifact_root = artifact_root
        self._starts: dict[str, int] = {}  # run id -> its start time, the timestamp of its metrics
        if tracking_uri.startswith("sqlite:///"):
            self.client = self._sqlite_client(Path(tracking_uri.removeprefix("sqlite:///")))
        else:
            self.client = MlflowClient(tracking_uri=tracking_uri)

    def _sqlite_client(self, path: Path) -> MlflowClient:
        """The client of a local SQLite tracking store, created (and migrated: the client does it
        when it starts) under a file lock: MLflow's own schema setup fails when two processes
        create one store at once."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_name(path.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                return MlflowClient(tracking_uri=self.uri)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def check(self) -> None:
        """Reach the tracking store once, so a bad URI fails before anything is written (a server
        is asked once, with a 10 s timeout, not with MLflow's minutes of retries)."""
        quick = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
        saved = {name: os.environ.get(name) for name in quick}
        os.environ.update(quick)
        try:
            self.client.search_experiments(max_results=1)
        except (MlflowException, OSError) as exc:
            raise UserError(
                f"--mlflow: cannot use tracking store {mask_secrets(self.uri)}: "
                f"{mask_secrets(str(exc).splitlines()[0])}"
            ) from None
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def experiment_id(self, name: str) -> str:
        exp = self._call(self.client.get_experiment_by_name, name)
        if exp is not None:
            return exp.experiment_id
        location = Path(self.artifact_root).resolve().as_uri() if self.artifact_root else None
        return self._call(self.client.create_experiment, name, artifact_location=location)

    def _find(self, experiment_id: str, tag: str, value: str, statuses=("FINISHED", "RUNNING")):
        runs = self._call(
            self.client.search_runs,
            [experiment_id],
            filter_string=f"tags.`{tag}` = '{value}'",
            max_results=50,
            order_by=["attributes.start_time DESC"],
        )
        return next((r for r in runs if r.info.status in statuses), None)

    def parent_run(self, *, experiment: str, spec_hash: str, params: dict, tags: dict) -> tuple[str, str]:
        """(mlflow experiment id, parent run id), reusing the run of an earlier identical spec."""
        exp_id = self.experiment_id(experiment)
        found = self._find(exp_id, TAG_SPEC, spec_hash, statuses=("FINISHED", "RUNNING", "FAILED", "KILLED"))
        if found is not None:
            self._call(self.client.update_run, found.info.run_id, status="RUNNING")
            return exp_id, found.info.run_id
        run = self._call(
            self.client.create_run,
            exp_id,
            run_name=fit(experiment),
            tags={TAG_SPEC: spec_hash, TAG_KIND: "experiment", **tags},
        )
        self._send(run.info.run_id, params=[Param(k, v) for k, v in flatten(params).items()])
        return exp_id, run.info.run_id

    def start_job(
        self, experiment_id: str, parent_run_id: str, *, job_hash: str, kind: str, name: str, params: dict, tags: dict
    ) -> str:
        run = self._call(
            self.client.create_run,
            experiment_id,
            run_name=fit(name),
            tags={PARENT_TAG: parent_run_id, TAG_JOB: job_hash, TAG_KIND: kind, **tags},
        )
        self._starts[run.info.run_id] = run.info.start_time  # its metrics' timestamp, without asking again
        # at once, so a run shows its config while its job runs (for hours, a training job)
        self._send(run.info.run_id, params=[Param(k, v) for k, v in flatten(params).items()])
        return run.info.run_id

    def log_all(
        self,
        run_id: str,
        *,
        metrics: dict[str, float] | None = None,
        series: dict[str, list[tuple[int, float]]] | None = None,
        tags: dict[str, str] | None = None,
    ) -> None:
        """A recorder's whole log in as few calls as MLflow allows (1,000 metrics and 100 tags each):
        `metrics` at step 0, each of `series` as (step, value) points."""
        at = self._stamp(run_id)
        values = [Metric(fit(k), float(v), at, 0) for k, v in (metrics or {}).items()]
        values += [
            Metric(fit(name), float(v), at, int(step)) for name, points in (series or {}).items() for step, v in points
        ]
        self._send(run_id, metrics=values, tags=[RunTag(fit(k), v) for k, v in (tags or {}).items()])

    def _send(self, run_id: str, *, metrics: list = (), params: list = (), tags: list = ()) -> None:
        """Metrics, params and tags in as few batches as MLflow's limits allow (100 params, 100 tags,
        1,000 entries in all per batch)."""
        metrics, params, tags = list(metrics), list(params), list(tags)
        while True:
            p, t = params[:100], tags[:100]
            m = metrics[: 1000 - len(p) - len(t)]
            self._call(self.client.log_batch, run_id, metrics=m, params=p, tags=t)
            params, tags, metrics = params[len(p) :], tags[len(t) :], metrics[len(m) :]
            if not (params or tags or metrics):
                return

    def log_dict(self, run_id: str, data: dict, name: str) -> None:
        """A JSON artifact."""
        self._call(self.client.log_dict, run_id, data, name)

    def _stamp(self, run_id: str) -> int:
        """The timestamp of a run's metrics: when the run started (milliseconds since the epoch).
        One per run, so a value logged again (a record retried after a crash) is the same point."""
        if run_id not in self._starts:
            self._starts[run_id] = self._call(self.client.get_run, run_id).info.start_time
        return self._starts[run_id]

    def is_server(self) -> bool:
        """Whether the tracking store is an MLflow server (whose artifact store every node can reach)."""
        return self.uri.startswith(("http://", "https://"))

    def artifact_uri(self, run_id: str) -> str:
        """Where the run's artifacts go (a server's proxied `mlflow-artifacts:` URI, a bucket, a folder)."""
        return self._call(self.client.get_run, run_id).info.artifact_uri

    def log_text(self, run_id: str, text: str, name: str) -> None:
        """A text artifact (a job's worker log)."""
        self._call(self.client.log_text, run_id, text, name)

    def log_artifact(self, run_id: str, path: str | Path, artifact_path: str | None = None) -> None:
        self._call(self.client.log_artifact, run_id, str(path), artifact_path)

    def end_abandoned(self, experiment_id: str, *, done: set[str], claimed: set[str]) -> int:
        """End the runs a dead driver left RUNNING in the experiment: those of jobs that are done
        (it died between recording and ending the run) as FINISHED, those of jobs this driver has
        just claimed as KILLED. Returns how many."""
        runs = self._call(
            self.client.search_runs, [experiment_id], filter_string="attributes.status = 'RUNNING'", max_results=1000
        )
        ended = 0
        for r in runs:
            job = r.data.tags.get(TAG_JOB)
            if job in done or job in claimed:
                self._call(self.client.set_terminated, r.info.run_id, status="FINISHED" if job in done else "KILLED")
                ended += 1
        return ended

    def end(self, run_id: str, ok: bool) -> None:
        self._call(self.client.set_terminated, run_id, status="FINISHED" if ok else "FAILED")

    def _call(self, method, *args, **kwargs):
        """One MLflow call, retried with backoff while the tracking store is unreachable or busy, for
        up to retry_s seconds; then one UserError naming the store. What the store refuses (a name
        it does not take) is one UserError at once; other errors go through."""
        deadline = time.monotonic() + self.retry_s
        delay = 0.1
        while True:
            try:
                return method(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 (sorted by _transient: the rest is raised as it is)
                if isinstance(exc, MlflowException) and not _transient(exc):  # a refusal: one line
                    raise UserError(
                        f"MLflow tracking store {mask_secrets(self.uri)} refused {method.__name__}: "
                        f"{mask_secrets(_first_line(exc))}"
                    ) from None
                if not _transient(exc):
                    raise
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise UserError(
                        f"MLflow tracking store {mask_secrets(self.uri)} unavailable for {self.retry_s:g} s "
                        f"(--retry-s, SPECFLEET_MLFLOW_RETRY_S): {mask_secrets(_first_line(exc))}"
                    ) from None
                wait = min(delay, remaining)
                log.warning("MLflow %s: %s; retrying in %.2f s", method.__name__, mask_secrets(_first_line(exc)), wait)
                time.sleep(wait)
                delay = min(2 * delay, 2.0)


# What an unreachable or busy tracking store says, through the REST client or a SQL store.
_TRANSIENT_TEXT = (
    "Max retries exceeded",
    "Connection refused",
    "Connection aborted",
    "Connection reset",
    "RemoteDisconnected",
    "timed out",
    "database is locked",
    "could not connect",
    "server closed",
    "connection failed",
    "Temporary failure",
    "503",
    "502",
    "504",
)


def _transient(exc: BaseException) -> bool:
    from sqlalchemy.exc import InterfaceError, OperationalError

    if isinstance(exc, (OSError, OperationalError, InterfaceError)):
        return True
    if isinstance(exc, MlflowException):
        return exc.error_code in ("TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED") or any(
            t in str(exc) for t in _TRANSIENT_TEXT
        )
    return type(exc).__module__.startswith(("requests", "urllib3"))


def _first_line(exc: BaseException) -> str:
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)[:300]
