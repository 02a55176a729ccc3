"""What `specfleet report` shows, read back from the database: one experiment's finished jobs as typed
results, grouped by pairing, and the tuned-config versions its select jobs wrote.

Everything here comes from stored runs (the results every job wrote when it finished), so a report can
be made again at any time, on any machine that reaches the database, without rerunning anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import ValidationError

from pipeline.core.contracts import Measured, Profiled, Selected, Served, Trained, Validated
from pipeline.core.kinds import kind as job_kind
from pipeline.core.labels import shown
from pipeline.errors import UserError

# the kinds a report reads, by the attribute of PairingResults that holds each one's result
PAIRING_KINDS = {
    "distill_drafter": "distilled",  # the drafter's stage after its own training (its spec's `distill`)
    "measure_curve": "measured",
    "profile_cost": "profiled",
    "engine_cost": "profiled",  # the cost table timed by the serving engine (cost.timed_by: vllm)
    "select_depth": "selected",
    "measure_speedup": "validated",
    "serve_check": "served",
}


@dataclass
class PairingResults:
    """One target/drafter pairing's results in one experiment (None: that job did not run or finish)."""

    target: str
    drafter: str
    measured: Measured | None = None
    profiled: Profiled | None = None
    selected: Selected | None = None
    validated: Validated | None = None
    served: Served | None = None  # the serving engine's check (a spec with `serving:`)
    distilled: Trained | None = None  # the distill_drafter job's drafter, with its rollouts' metrics
    distill: dict | None = None  # that stage's spec (method, rounds, seed, ...)
    jobs: dict[str, dict] = field(default_factory=dict)  # kind -> job_hash, mlflow_run_id, duration_s, seed
    drafter_kind: str | None = None  # the drafter spec's kind (eagle3, standalone), where a job's config holds it
    drafter_block_size: int | None = None  # a DFlash drafter's trained block (its spec's block_size)
    held_out_prompts: int | None = None  # the prompts the speedup and serving checks decoded (validation.num_prompts)
    validated_on_curve: bool = False  # those were the first of the curve's own prompts (validation.prompts: curve)

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
    pairings: tuple[PairingResults, ...]  # in the order their first job finished
    tuned: tuple[dict, ...]  # `best` rows (every version) written by this experiment's select jobs
    skipped: tuple[str, ...]  # finished jobs whose stored result an older release wrote in another shape
    job_seconds: dict[str, tuple[float, ...]] = field(default_factory=dict)  # kind -> each finished job's duration_s

    @property
    def ref(self) -> str:
        """The experiment as `specfleet report` takes it: NAME@ID (two runs of one name differ by it)."""
        return f"{self.name}@{self.id}"


def load_experiment(store, name: str) -> ExperimentRecord:
    """The newest experiment called `name`, or with `name@ID` that run of it (`specfleet status` lists
    the ids); a UserError names what the database has when it has no such experiment."""
    experiments = store.experiments()
    wanted, _, run = name.rpartition("@") if "@" in name else (name, "", "")
    found = [e for e in experiments if e["name"] == wanted and (not run or str(e["id"]) == run)]
    if not found:
        known = sorted(f"{e['name']}@{e['id']}" for e in experiments)
        raise UserError(
            f"EXPERIMENT: no experiment {shown(name)} in the database"
            + (f" (it has: {', '.join(known)})" if known else " (it has none yet)")
        )
    exp = max(found, key=lambda e: (e["created_at"], e["id"]))
    jobs, skipped, seconds = [], [], {}
    for job in sorted(store.experiment_results(exp["id"]), key=lambda j: (j["finished_at"] or "", j["job_hash"])):
        if job["duration_s"] is not None:
            seconds.setdefault(job["kind"], []).append(job["duration_s"])
        if job["kind"] not in PAIRING_KINDS:
            continue
        try:  # a result or config an older release stored in another shape is listed, not shown
            job["typed"] = job_kind(job["kind"]).result.model_validate(job["result"])
            job["pairing"] = (member_name(job["config"]["target"]), member_name(job["config"]["drafter"]))
        except (ValidationError, KeyError, TypeError):
            skipped.append(job["name"])
            continue
        jobs.append(job)
    tuned = {r["job_hash"]: r for r in store.best(history=True)}
    pairings = _pairings(jobs, tuned)
    select_hashes = {p.jobs["select_depth"]["job_hash"] for p in pairings if "select_depth" in p.jobs}
    return ExperimentRecord(
        id=exp["id"],
        name=exp["name"],
        spec_hash=exp["spec_hash"],
        code_version=exp["code_version"],
        created_at=exp["created_at"],
        mlflow_run_id=exp["mlflow_run_id"],
        job_counts=exp["job_counts"],
        pairings=tuple(pairings),
        tuned=tuple(r for h, r in tuned.items() if h in select_hashes),
        skipped=tuple(skipped),
        job_seconds={k: tuple(v) for k, v in seconds.items()},
    )


def _pairings(jobs: list[dict], tuned: dict[str, dict]) -> list[PairingResults]:
    """One PairingResults per (target, drafter), each kind's newest finished job (a rerun of a changed spec
    links its new jobs to the same experiment). A depth choice takes the curve and cost it was made
    from (its tuned config names them): a cost job is shared by pairings that time alike, so its
    own config may carry another pairing's names."""
    pairings: dict[tuple[str, str], PairingResults] = {}
    by_hash = {j["job_hash"]: j for j in jobs}
    for job in jobs:  # oldest first: the newest of a kind is set last
        pairing = pairings.setdefault(job["pairing"], PairingResults(*job["pairing"]))
        if PAIRING_KINDS[job["kind"]] != "profiled":  # a cost job is attached through the choice below
            _attach(pairing, job)
            _read_config(pairing, job["config"])
    for pairing in pairings.values():
        select = pairing.jobs.get("select_depth")
        row = tuned.get(select["job_hash"]) if select else None
        for key in ("curve_job_hash", "cost_job_hash"):
            if row and row.get(key) in by_hash:
                _attach(pairing, by_hash[row[key]])
    return [p for p in pairings.values() if p.measured or p.selected or p.validated or p.served]


def _attach(pairing: PairingResults, job: dict) -> None:
    setattr(pairing, PAIRING_KINDS[job["kind"]], job["typed"])
    pairing.jobs[job["kind"]] = {
        "job_hash": job["job_hash"],
        "mlflow_run_id": job["mlflow_run_id"],
        "duration_s": job["duration_s"],
        "seed": job["config"].get("seed", 0),
    }


def _read_config(pairing: PairingResults, config: dict) -> None:
    """What the summary says that only a job's config holds: the drafter's kind (a select job's
    config names the drafter only), its distillation stage, and how many held-out prompts the checks
    decoded."""
    drafter = config.get("drafter")
    if isinstance(drafter, dict) and drafter.get("kind"):
        pairing.drafter_kind = drafter["kind"]
        pairing.distill = drafter.get("distill") or pairing.distill
        if drafter["kind"] == "dflash":
            pairing.drafter_block_size = drafter.get("block_size")
    validation = config.get("validation")
    if isinstance(validation, dict) and validation.get("num_prompts"):
        pairing.held_out_prompts = validation["num_prompts"]
        pairing.validated_on_curve = validation.get("prompts") == "curve"


def member_name(ref) -> str:
    """A pairing member's name from a job config: a select job stores the name, others the whole spec."""
    return ref if isinstance(ref, str) else ref["name"]
