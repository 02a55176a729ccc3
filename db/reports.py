"""The store's reads for reports: tuned configs, curves, diagnostics, checks, experiments, jobs."""

from __future__ import annotations

import json
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from db import queries
from db.connection import Connected
from db.queries import WORKLOAD_KEYS
from db.tables import JobRecord


class Reports(Connected):
    def best(self, *, target: str | None = None, drafter: str | None = None, history: bool = False) -> list[dict]:
        """The active tuned-config version per (target, drafter, hardware, condition).

        With ``history``, every version, newest first within a workload. Rows have BEST_KEYS;
        ``schedule`` is the parsed [[lo, hi, k], ...] or None, ``job_hash`` None for a
        production version.
        """

        def body(session: Session):
            return queries.best_configs(session, target=target, drafter=drafter, history=history)

        return self._read(body)

    def curves(
        self,
        *,
        target: str | None = None,
        drafter: str | None = None,
        condition: str | None = None,
        category: str | None = "",
    ) -> list[dict]:
        """One dict per stored depth, sorted by target, drafter, condition, temperature, depth.
        By default the curves over every prompt; ``category`` one prompt category's, None all."""

        def body(session: Session):
            return queries.curve_values(session, target=target, drafter=drafter, condition=condition, category=category)

        return self._read(body)

    def with_categories(self, rows: list[dict]) -> list[dict]:
        """`best` rows, each with `categories`: the per-category depths of the select job behind it
        (for a production version, of the newest offline version of its workload), [] for none."""
        offline: dict[tuple, str] = {}
        for r in self.best(history=True):  # newest version first within a workload
            if r["source"] == "offline" and r["job_hash"]:
                offline.setdefault(tuple(r[k] for k in WORKLOAD_KEYS), r["job_hash"])
        source = [r["job_hash"] or offline.get(tuple(r[k] for k in WORKLOAD_KEYS)) for r in rows]
        found = self.category_depths([h for h in source if h])
        return [{**r, "categories": found.get(h, [])} for r, h in zip(rows, source)]

    def with_tree_checks(self, rows: list[dict]) -> list[dict]:
        """`best` rows, each with `tree_measured_over_chain`: the chosen tree's tokens/s over the chain's
        in the newest speedup check that ran that tree for the pairing on that hardware (None: none did)."""

        def key(row: dict) -> tuple:
            return row["target"], row["drafter"], row["hardware"], json.dumps(row["tree"])

        newest = {}  # sorted by job within a pairing and hardware: the newest is written last
        for check in self._read(
            lambda session: queries.tree_check_values(session, target=None, drafter=None, chosen_only=True)
        ):
            newest[key(check)] = check["tokens_per_s"] / check["chain_tokens_per_s"]
        return [{**r, "tree_measured_over_chain": newest.get(key(r)) if r.get("tree") else None} for r in rows]

    def category_depths(self, job_hashes: Sequence[str]) -> dict[str, list[dict]]:
        """The depth chosen per prompt category by each of these select jobs, by job hash."""

        def body(session: Session):
            ids = dict(
                session.execute(
                    select(JobRecord.id, JobRecord.job_hash).where(JobRecord.job_hash.in_(list(job_hashes)))
                ).all()
            )
            return {ids[job_id]: rows for job_id, rows in queries.category_depths(session, list(ids)).items()}

        return self._read(body)

    def diagnostics(
        self,
        *,
        target: str | None = None,
        drafter: str | None = None,
        condition: str | None = None,
    ) -> list[dict]:
        """DIAGNOSTIC_KEYS plus job_hash, sorted by target, drafter, condition, name, depth."""

        def body(session: Session):
            return queries.diagnostic_values(session, target=target, drafter=drafter, condition=condition)

        return self._read(body)

    def rank_accepts(self, *, target: str | None = None, drafter: str | None = None) -> list[dict]:
        """RANK_ACCEPT_KEYS plus job_hash: acceptance by rank and depth beside each curve."""
        return self._read(lambda session: queries.rank_accept_values(session, target=target, drafter=drafter))

    def tree_checks(self, *, target: str | None = None, drafter: str | None = None) -> list[dict]:
        """TREE_CHECK_KEYS plus job_hash and the decoded `tree`: every tree a speedup check ran."""
        return self._read(lambda session: queries.tree_check_values(session, target=target, drafter=drafter))

    def speedup_checks(self, *, target: str | None = None, drafter: str | None = None) -> list[dict]:
        """SPEEDUP_KEYS plus job_hash, one dict per benchmarked depth.

        Sorted by target, drafter, hardware, condition, temperature, job, then depth.
        """

        def body(session: Session):
            return queries.speedup_checks(session, target=target, drafter=drafter)

        return self._read(body)

    def experiments(self) -> list[dict]:
        def body(session: Session):
            return queries.experiment_summaries(session)

        return self._read(body)

    def experiment_results(self, experiment_id: int) -> list[dict]:
        """The finished jobs of one experiment: kind, name, job_hash, mlflow_run_id, duration_s,
        finished_at, and the parsed `config` and `result` (the kind's contracts, as JSON)."""
        return self._read(lambda session: queries.experiment_results(session, experiment_id))

    def jobs(self, experiment_id: int | None = None) -> list[dict]:
        def body(session: Session):
            return queries.job_summaries(session, experiment_id)

        return self._read(body)
