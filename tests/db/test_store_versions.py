"""Versioned tuned configs on both real backends: one active version per workload, history kept.

A workload is (target, drafter, hardware, condition). Fixtures and helpers come from
test_store.py, so these tests run on the same SQLite file and fresh PostgreSQL database.
"""

from __future__ import annotations

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import column, create_engine, insert, select, table, update
from sqlalchemy.exc import IntegrityError
from support.databases import engine_for
from test_store import BEST_KEYS, _experiment, _link, _select_job, _tuned

from db.migrate import alembic_config, current_revision, head_revision
from db.rows import ChoiceRows
from db.store import Store, StoreError
from db.tables import Base, Experiment, JobRecord, TunedConfig, utc_now

PRODUCTION = dict(
    target="tiny-llama",
    drafter="eagle-1layer",
    hardware="cpu x1 float32",
    condition="greedy",
    temperature=0.0,
    depth=2,
    accept_len=2.1,
    speedup=1.6,
    cost_ratio=0.05,
    code_version="prod-1",
)


def _versions(store: Store, **where: object) -> list[tuple]:
    rows = store.best(history=True, **where)
    return [(r["condition"], r["version"], r["active"], r["source"], r["depth"]) for r in rows]


def test_each_decision_is_a_new_version_and_one_per_workload_is_active(store: Store) -> None:
    experiment_id = _experiment(store)
    _select_job(store, experiment_id, "s-1", depth=2)
    _select_job(store, experiment_id, "s-2", depth=4)
    _select_job(store, experiment_id, "s-sampled", condition="sampled", temperature=1.0, depth=1)
    _select_job(store, experiment_id, "s-3", depth=5)

    assert _versions(store) == [
        ("greedy", 3, True, "offline", 5),
        ("greedy", 2, False, "offline", 4),
        ("greedy", 1, False, "offline", 2),
        ("sampled", 1, True, "offline", 1),
    ]
    best = store.best()
    assert [(b["condition"], b["version"], b["job_hash"]) for b in best] == [
        ("greedy", 3, "s-3"),
        ("sampled", 1, "s-sampled"),
    ]
    assert all(set(b) == BEST_KEYS for b in best)
    assert store.best(drafter="medusa") == [] and store.best(drafter="medusa", history=True) == []


def test_schedule_and_provenance_round_trip(store: Store) -> None:
    experiment_id = _experiment(store)
    provenance = {"curve_job_hash": "c" * 64, "cost_job_hash": "k" * 64, "drafter_job_hash": None}
    schedule = [(1, 8, 4), [9, 64, 2], [65, 256, 0]]
    _select_job(store, experiment_id, "s-1", schedule=schedule, **provenance)

    (best,) = store.best()
    assert best["schedule"] == [[1, 8, 4], [9, 64, 2], [65, 256, 0]]
    assert {k: best[k] for k in provenance} == provenance


@pytest.mark.parametrize(
    "schedule",
    [[], [[2, 8, 4]], [[1, 8, 4], [10, 64, 2]], [[1, 8, -1]], [[1, 8]], [[1, 8.0, 2]]],
)
def test_bad_schedule_is_refused_and_writes_nothing(store: Store, schedule: list) -> None:
    experiment_id = _experiment(store)
    _link(store, experiment_id, "s-1")
    with pytest.raises(StoreError, match="schedule"):
        store.mark_done("s-1", result={}, rows=ChoiceRows(tuned=_tuned(experiment_id, schedule=schedule)))
    assert store.best(history=True) == []
    assert store.finished_result("s-1") is None


def test_production_version_becomes_active_and_shows_in_best(store: Store) -> None:
    experiment_id = _experiment(store)
    _select_job(store, experiment_id, "s-1", depth=3)

    version = store.add_production_config(
        **PRODUCTION, schedule=[[1, 16, 3], [17, 512, 1]], notes="p99 latency regressed at k=3"
    )
    assert version == 2
    (best,) = store.best()
    assert (best["version"], best["active"], best["source"], best["job_hash"]) == (2, True, "production", None)
    assert (best["depth"], best["code_version"], best["spec_hash"]) == (2, "prod-1", None)
    assert best["schedule"] == [[1, 16, 3], [17, 512, 1]]
    assert best["notes"] == "p99 latency regressed at k=3"
    assert _versions(store) == [("greedy", 2, True, "production", 2), ("greedy", 1, False, "offline", 3)]

    # A later offline decision supersedes the production one; history keeps both.
    _select_job(store, experiment_id, "s-2", depth=4)
    assert [(b["version"], b["source"]) for b in store.best()] == [(3, "offline")]
    assert [r["active"] for r in store.best(history=True)] == [True, False, False]


def test_production_config_for_a_new_workload_is_version_1(store: Store) -> None:
    assert store.add_production_config(**{**PRODUCTION, "hardware": "NVIDIA H200 x1 bf16"}) == 1
    assert [(b["hardware"], b["version"]) for b in store.best()] == [("NVIDIA H200 x1 bf16", 1)]


def test_bad_production_config_is_refused(store: Store) -> None:
    with pytest.raises(StoreError, match="speedup must be a finite number"):
        store.add_production_config(**{**PRODUCTION, "speedup": float("nan")})
    with pytest.raises(StoreError, match="condition must be a string of 1..64"):
        store.add_production_config(**{**PRODUCTION, "condition": "x" * 65})
    assert store.best(history=True) == []


def test_replayed_mark_done_adds_no_version(store: Store) -> None:
    experiment_id = _experiment(store)
    _select_job(store, experiment_id, "s-1", depth=3)
    store.add_production_config(**PRODUCTION)

    # The replay neither adds a version nor re-activates the job's superseded one.
    store.mark_done("s-1", result={"depth": 3}, rows=ChoiceRows(tuned=_tuned(experiment_id, depth=3)))
    store.mark_done("s-1", result={"depth": 3}, rows=ChoiceRows(tuned=_tuned(experiment_id, depth=9)))
    assert _versions(store) == [("greedy", 2, True, "production", 2), ("greedy", 1, False, "offline", 3)]


def test_failed_write_keeps_the_active_version(store: Store) -> None:
    experiment_id = _experiment(store)
    _select_job(store, experiment_id, "s-1", depth=3)
    before = store.best(history=True)
    _link(store, experiment_id, "s-2")

    # The new version's foreign key fails after the old one was deactivated: all rolls back.
    with pytest.raises(StoreError, match="mark_done refused"):
        store.mark_done("s-2", result={}, rows=ChoiceRows(tuned=_tuned(999_999, depth=4)))
    # A bad per-category depth in the same mark_done also takes the version with it.
    with pytest.raises(StoreError, match="missing keys"):
        store.mark_done(
            "s-2", result={}, rows=ChoiceRows(tuned=_tuned(experiment_id), category_depths=[{"category": "code"}])
        )
    assert store.best(history=True) == before
    assert store.finished_result("s-2") is None


def test_database_refuses_a_second_active_version(store: Store, db_url: str) -> None:
    experiment_id = _experiment(store)
    _select_job(store, experiment_id, "s-1")
    engine = create_engine(db_url)
    row = {k: v for k, v in _tuned(experiment_id).items() if k != "experiment_id"}
    try:
        with pytest.raises(IntegrityError), engine.begin() as connection:
            connection.execute(
                insert(TunedConfig.__table__).values(
                    **row, version=2, active=True, source="production", created_at=utc_now()
                )
            )
        with pytest.raises(IntegrityError), engine.begin() as connection:  # offline needs a job
            connection.execute(update(TunedConfig.__table__).values(source="offline", job_id=None))
    finally:
        engine.dispose()


def test_database_at_revision_0002_upgrades_tuned_rows_to_version_1(db_url: str) -> None:
    engine = engine_for(db_url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0002")
        experiment = {
            "name": "old",
            "spec_hash": "spec-1",
            "spec_yaml": "name: old\n",
            "code_version": "abc123",
            "created_at": utc_now(),
        }
        experiment_id = connection.execute(
            insert(Experiment.__table__).values(**experiment).returning(Experiment.id)
        ).scalar_one()
        job = {
            "job_hash": "old-select",
            "kind": "select_depth",
            "name": "select-old",
            "status": "done",
            "attempts": 1,
            "config_json": "{}",
            "result_json": "{}",
            "created_at": utc_now(),
        }
        job_id = connection.execute(insert(JobRecord.__table__).values(**job).returning(JobRecord.id)).scalar_one()
        # The 0002 shape of tuned_configs: no version columns yet.
        old_row = {**_tuned(experiment_id, depth=2), "job_id": job_id, "created_at": utc_now()}
        old_table = table("tuned_configs", *(column(key) for key in old_row))
        connection.execute(insert(old_table).values(**old_row))

    with Store(db_url) as store:
        (best,) = store.best()
        assert (best["version"], best["active"], best["source"], best["job_hash"]) == (1, True, "offline", "old-select")
        assert (best["depth"], best["schedule"], best["notes"]) == (2, None, None)
        _link(store, experiment_id, "new-select")
        store.mark_done("new-select", result={}, rows=ChoiceRows(tuned=_tuned(experiment_id, depth=5)))
        assert _versions(store) == [("greedy", 2, True, "offline", 5), ("greedy", 1, False, "offline", 2)]

    with engine.connect() as connection:
        assert current_revision(connection) == head_revision()
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
        assert (
            connection.scalar(select(TunedConfig.__table__.c.active).where(TunedConfig.__table__.c.version == 1))
            is False
        )
    engine.dispose()
