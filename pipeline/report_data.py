"""What `specfleet report` shows, read back from the database: one experiment's finished jobs as typed
results, grouped by pairing, and the tuned-config versions its select jobs wrote.

Everything here comes from stored runs (the results every job wrote when it finished), so a report can
be made again at any time, on any machine that reaches the database, without rerunning anything.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import ValidationError

from pipeline.core.contracts import Measured, Profiled, Selected, Validated
from pipeline.core.kinds import kind as job_kind
from pipeline.errors import UserError

# the kinds a report reads, by the attribute of Pairing that holds each one's result
PAIRING_KINDS = {"measure_curve": "measured", "profile_cost": "profiled", "select_depth": "selected",
                 "measure_speedup": "validated"}


@dataclass
class Pairing:
    """One target/drafter pairing's results in one experiment (None: that job did not run or finish)."""

    target: str
    drafter: str
    measured: Measured | None = None
    profiled: Profiled | None = None
    selected: Selected | None = None
    validated: Validated | None = None
    jobs: dict[str, dict] = field(default_factory=dict)  # kind -> job_hash, mlflow_run_id, duration_s

    @property
    def label(self) -> str:
        return f"{self.target}/{self.drafter}"


@dataclass(frozen=True)
class ExperimentRecord:
    id: int
    name: str
    spec_hash: str
    code_version: str
    created_at: str
    mlflow_run_id: str | None
    job_counts: dict[str, int]
    pairings: tuple[Pairing, ...]  # in the order their first job finished
    tuned: tuple[dict, ...]  # `best` rows (every version) written by this experiment's select jobs
    skipped: tuple[str, ...]  # finished jobs whose stored result an older release wrote in another shape


def load_experiment(store, name: str) -> ExperimentRecord:
    """The newest experiment called `name`, or with `name@ID` that run of it (`specfleet status` lists
    the ids); a UserError names what the database has when it has no such experiment."""
    experiments = store.experiments()
    wanted, _, run = name.rpartition("@") if "@" in name else (name, "", "")
    found = [e for e in experiments if e["name"] == wanted and (not run or str(e["id"]) == run)]
    if not found:
        known = sorted(f"{e['name']}@{e['id']}" for e in experiments)
        raise UserError(f"EXPERIMENT: no experiment {name!r} in the database"
                        + (f" (it has: {', '.join(known)})" if known else " (it has none yet)"))
    exp = max(found, key=lambda e: (e["created_at"], e["id"]))
    pairings: dict[tuple[str, str], Pairing] = {}
    skipped = []
    select_hashes = set()
    for job in store.experiment_results(exp["id"]):
        attr = PAIRING_KINDS.get(job["kind"])
        if attr is None:
            continue
        try:
            result = job_kind(job["kind"]).result.model_validate(job["result"])
        except ValidationError:
            skipped.append(job["name"])
            continue
        key = (_name(job["config"]["target"]), _name(job["config"]["drafter"]))
        pairing = pairings.setdefault(key, Pairing(*key))
        setattr(pairing, attr, result)
        pairing.jobs[job["kind"]] = {k: job[k] for k in ("job_hash", "mlflow_run_id", "duration_s")}
        if attr == "selected":
            select_hashes.add(job["job_hash"])
    tuned = tuple(r for r in store.best(history=True) if r["job_hash"] in select_hashes)
    return ExperimentRecord(id=exp["id"], name=exp["name"], spec_hash=exp["spec_hash"],
                            code_version=exp["code_version"], created_at=exp["created_at"],
                            mlflow_run_id=exp["mlflow_run_id"], job_counts=exp["job_counts"],
                            pairings=tuple(pairings.values()), tuned=tuned, skipped=tuple(skipped))


def _name(ref) -> str:
    """A pairing member's name from a job config: a select job stores the name, others the whole spec."""
    return ref if isinstance(ref, str) else ref["name"]
