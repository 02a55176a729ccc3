"""Speedup checks on both real backends: the real engine at every depth beside the cost model.

One row per (job, condition, temperature, run, batch size, depth); depth 0 is plain decoding, the
baseline. specfleet's own engine is swept at batch size 1 (the store's defaults); a serving engine's
check adds rows per batch size, swept and as printed.
Fixtures and helpers come from test_store.py, so these tests run on the same SQLite file and
fresh PostgreSQL database.
"""

from __future__ import annotations

import math

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, insert, inspect
from sqlalchemy.exc import IntegrityError
from support.databases import engine_for
from test_store import _diag, _experiment, _link, _speedup, _status

from db.migrate import alembic_config, current_revision, head_revision
from db.rows import CheckRows, CurveRows
from db.store import SPEEDUP_KEYS, Store, StoreError
from db.tables import Base, JobRecord, SpeedupPoint, utc_now
from tests.db.test_migration_0005 import CURVES_AT_0004

ROW_KEYS = {*SPEEDUP_KEYS, "job_hash"}


def _benchmark(tokens_per_s: tuple[float, ...], **more) -> list[dict]:
    """Depths 0..len-1 of one benchmark, each measured against depth 0's tokens_per_s."""
    return [_speedup(k, tps, tokens_per_s[0], **more) for k, tps in enumerate(tokens_per_s)]


def _bench_job(store: Store, job_hash: str = "bench-a") -> None:
    _link(store, _experiment(store), job_hash, kind="measure_speedup")
    store.mark_running(job_hash, mlflow_run_id=f"run-{job_hash}")


def _placement(row: dict) -> tuple:
    keys = ("target", "drafter", "hardware", "condition", "temperature", "job_hash", "depth")
    return tuple(row[key] for key in keys)


def test_speedup_checks_round_trip_sorted_and_filtered(store: Store) -> None:
    # One job benchmarks one pairing on one hardware, under each of its conditions.
    given = {
        "bench-a": [
            *_benchmark((40.0, 52.0, 58.0, 55.0)),
            *_benchmark((30.0, 33.0), condition="sampled", temperature=1.0),
        ],
        "bench-wide": _benchmark((80.0, 150.0), hardware="cpu 16t x1 float32"),
        "bench-medusa": _benchmark((20.0, 26.0), drafter="medusa"),
        "bench-other-target": _benchmark((9.0,), target="a-target"),
        "bench-again": _benchmark((41.0, 50.0)),  # the same benchmark as bench-a, run again
    }
    for job_hash, checks in given.items():
        _bench_job(store, job_hash)
        store.mark_done(job_hash, result={}, rows=CheckRows(speedup_checks=checks[::-1]))

    rows = store.speedup_checks()
    assert all(set(row) == ROW_KEYS for row in rows)
    cpu, wide = "cpu x1 float32", "cpu 16t x1 float32"
    assert [_placement(row) for row in rows] == [
        ("a-target", "eagle", cpu, "greedy", 0.0, "bench-other-target", 0),
        *(("tiny-llama", "eagle", wide, "greedy", 0.0, "bench-wide", k) for k in (0, 1)),
        *(("tiny-llama", "eagle", cpu, "greedy", 0.0, "bench-a", k) for k in (0, 1, 2, 3)),
        *(("tiny-llama", "eagle", cpu, "greedy", 0.0, "bench-again", k) for k in (0, 1)),
        *(("tiny-llama", "eagle", cpu, "sampled", 1.0, "bench-a", k) for k in (0, 1)),
        *(("tiny-llama", "medusa", cpu, "greedy", 0.0, "bench-medusa", k) for k in (0, 1)),
    ]
    defaults = {"engine": "specfleet", "batch_size": 1, "run": "sweep", "depth_run": None}
    for job_hash, checks in given.items():
        mine = [{k: r[k] for k in SPEEDUP_KEYS} for r in rows if r["job_hash"] == job_hash]
        key = lambda d: (d["condition"], d["depth"])  # noqa: E731
        assert sorted(mine, key=key) == sorted(({**defaults, **c} for c in checks), key=key)

    greedy = [r for r in rows if r["job_hash"] == "bench-a" and r["condition"] == "greedy"]
    baseline = greedy[0]
    assert (baseline["depth"], baseline["measured_speedup"], baseline["engine_accept_len"]) == (0, 1, 1)
    assert [r["measured_speedup"] for r in greedy] == pytest.approx([1.0, 1.3, 1.45, 1.375])
    assert [r["predicted_speedup"] for r in greedy] == pytest.approx([1.0, 1.25, 1.5, 1.75])
    assert {r["drafter"] for r in store.speedup_checks(target="tiny-llama")} == {"eagle", "medusa"}
    assert [r["tokens_per_s"] for r in store.speedup_checks(target="a-target")] == [9.0]
    medusa = store.speedup_checks(target="tiny-llama", drafter="medusa")
    assert [(r["job_hash"], r["depth"]) for r in medusa] == [("bench-medusa", k) for k in (0, 1)]
    assert len(store.speedup_checks(drafter="eagle")) == len(rows) - 2
    assert store.speedup_checks(target="absent") == []
    assert store.speedup_checks(target="a-target", drafter="medusa") == []


def test_speedup_checks_are_replaced_per_job(store: Store) -> None:
    _bench_job(store)
    _bench_job(store, "bench-b")
    store.mark_done("bench-a", result={}, rows=CheckRows(speedup_checks=_benchmark((40.0, 50.0, 45.0))))
    store.mark_done("bench-b", result={}, rows=CheckRows(speedup_checks=_benchmark((10.0,), drafter="medusa")))

    # A repeated mark_done replaces this job's rows and leaves other jobs' alone;
    # speedup_checks=None leaves them as they are, and an empty list removes them.
    store.mark_done("bench-a", result={}, rows=CheckRows(speedup_checks=_benchmark((40.0, 60.0))))
    store.mark_done("bench-a", result={}, rows=CurveRows(diagnostics=[_diag("rms", 1, 1.5)]))
    assert [(r["job_hash"], r["depth"], r["tokens_per_s"]) for r in store.speedup_checks()] == [
        ("bench-a", 0, 40.0),
        ("bench-a", 1, 60.0),
        ("bench-b", 0, 10.0),
    ]
    store.mark_done("bench-a", result={}, rows=CheckRows(speedup_checks=[]))
    assert [r["job_hash"] for r in store.speedup_checks()] == ["bench-b"]


def _bad_depth(depth: object) -> dict:
    return _speedup(1, 50.0) | {"depth": depth}


# Each case: the second of three rows is broken; the error names the row and the field.
BROKEN_CHECKS = {
    "missing-tokens_per_s": (
        {k: v for k, v in _speedup(1, 50.0).items() if k != "tokens_per_s"},
        r"missing keys \['tokens_per_s'\], unknown keys \[\]",
    ),
    "unknown-key": (_speedup(1, 50.0, speedup=1.2), r"missing keys \[\], unknown keys \['speedup'\]"),
    "zero-tokens_per_s": (_speedup(1, 0.0), r"tokens_per_s must be > 0, got 0\.0"),
    "negative-tokens_per_s": (_speedup(1, -5.0), r"tokens_per_s must be > 0"),
    "negative-depth": (_bad_depth(-1), r"depth must be an integer >= 0, got -1"),
    "float-depth": (_bad_depth(1.0), r"depth must be an integer >= 0, got 1\.0"),
    "bool-depth": (_bad_depth(True), r"depth must be an integer >= 0, got True"),
    "nan-measured_speedup": (_speedup(1, 50.0, measured_speedup=math.nan), r"measured_speedup must be a finite number"),
    "nan-tokens_per_s": (_speedup(1, math.nan), r"tokens_per_s must be a finite number"),
    "inf-predicted_speedup": (_speedup(1, 50.0, predicted_speedup=math.inf), r"predicted_speedup must be a finite"),
    "string-engine_accept_len": (_speedup(1, 50.0, engine_accept_len="2.0"), r"engine_accept_len must be a finite"),
    "long-hardware": (_speedup(1, 50.0, hardware="x" * 256), r"hardware must be a string of 1\.\.255"),
    "empty-condition": (_speedup(1, 50.0, condition=""), r"condition must be a string of 1\.\.64"),
    "not-a-dict": (("tiny-llama", 1, 50.0), r"need a dict, got tuple"),
    "zero-batch_size": (_speedup(1, 50.0, batch_size=0), r"batch_size must be an integer >= 1, got 0"),
    "float-batch_size": (_speedup(1, 50.0, batch_size=2.0), r"batch_size must be an integer >= 1, got 2\.0"),
    "unknown-run": (_speedup(1, 50.0, run="chosen"), r"run must be one of sweep, printed, got 'chosen'"),
    "long-engine": (_speedup(1, 50.0, engine="v" * 256), r"engine must be a string of 1\.\.255"),
    "nan-depth_run": (_speedup(1, 50.0, depth_run=math.nan), r"depth_run must be a finite number"),
}


@pytest.mark.parametrize("case", BROKEN_CHECKS)
def test_bad_speedup_check_is_refused_and_writes_nothing(store: Store, case: str) -> None:
    broken, message = BROKEN_CHECKS[case]
    _bench_job(store)
    checks = [_speedup(0, 40.0), broken, _speedup(2, 55.0)]

    with pytest.raises(StoreError, match=r"speedup_checks\[1\] of job bench-a: " + message):
        store.mark_done("bench-a", result={"max_depth": 2}, rows=CheckRows(speedup_checks=checks))

    job = _status(store, "bench-a")
    assert (job["status"], job["finished_at"]) == ("running", None)
    assert store.finished_result("bench-a") is None
    assert store.speedup_checks() == []


def test_repeated_depth_is_refused_and_keeps_the_earlier_rows(store: Store) -> None:
    _bench_job(store)
    store.mark_done("bench-a", result={"max_depth": 1}, rows=CheckRows(speedup_checks=_benchmark((40.0, 50.0))))
    before = store.speedup_checks()

    with pytest.raises(StoreError, match="mark_done refused"):
        store.mark_done(
            "bench-a",
            result={"max_depth": 9},
            rows=CheckRows(speedup_checks=[_speedup(0, 40.0), _speedup(1, 50.0), _speedup(1, 51.0)]),
        )
    assert store.speedup_checks() == before
    assert store.finished_result("bench-a") == {"max_depth": 1}


def test_database_refuses_bad_speedup_rows_itself(store: Store, db_url: str) -> None:
    _bench_job(store)
    store.mark_done("bench-a", result={}, rows=CheckRows(speedup_checks=_benchmark((40.0,))))
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            job_id = connection.execute(JobRecord.__table__.select()).one().id
            schema = inspect(connection)
            checks = {c["name"] for c in schema.get_check_constraints("speedup_checks")}
            uniques = {c["name"] for c in schema.get_unique_constraints("speedup_checks")}
            # PostgreSQL also lists the index behind the unique constraint.
            indexes = {i["name"] for i in schema.get_indexes("speedup_checks")} - uniques
        # compare_metadata leaves out check constraints, so their names are checked here.
        assert checks == {"ck_speedup_checks_depth", "ck_speedup_checks_tokens_per_s", "ck_speedup_checks_batch_size"}
        assert uniques == {"uq_speedup_checks_point"}
        assert indexes == {"ix_speedup_checks_target_drafter"}
        for bad in ({"depth": -1}, {"tokens_per_s": 0.0}, {"depth": 0}, {"batch_size": 0}):  # depth 0 is a repeat
            row = {**_speedup(3, 50.0), "job_id": job_id, **bad}
            with pytest.raises(IntegrityError), engine.begin() as connection:
                connection.execute(insert(SpeedupPoint.__table__).values(**row))
    finally:
        engine.dispose()


def test_database_at_revision_0003_upgrades_to_0004_and_back(db_url: str) -> None:
    engine = engine_for(db_url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0003")
        assert "speedup_checks" not in inspect(connection).get_table_names()
        job = {
            "job_hash": "old-curve",
            "kind": "measure_curve",
            "name": "measure-old",
            "status": "done",
            "attempts": 1,
            "config_json": "{}",
            "result_json": '{"a": 1}',
            "created_at": utc_now(),
        }
        job_id = connection.execute(insert(JobRecord.__table__).values(**job).returning(JobRecord.id)).scalar_one()
        point = {
            "job_id": job_id,
            "target": "tiny-llama",
            "drafter": "eagle",
            "condition": "greedy",
            "temperature": 0.0,
            "depth": 1,
            "cond_accept": 0.9,
            "survival": 0.9,
            "accept_len": 1.9,
        }
        connection.execute(insert(CURVES_AT_0004).values(**point))  # revision 0003 has the same columns

    with Store(db_url) as store:
        assert store.finished_result("old-curve") == {"a": 1}
        assert [(r["job_hash"], r["accept_len"]) for r in store.curves()] == [("old-curve", 1.9)]
        assert store.speedup_checks() == []
        _bench_job(store)
        store.mark_done("bench-a", result={}, rows=CheckRows(speedup_checks=_benchmark((40.0, 50.0))))
        assert [r["depth"] for r in store.speedup_checks()] == [0, 1]

    with engine.begin() as connection:
        assert current_revision(connection) == head_revision()
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
        # Downgrading drops the table and keeps everything else; upgrading brings it back empty.
        command.downgrade(alembic_config(connection), "0003")
        assert "speedup_checks" not in inspect(connection).get_table_names()
        assert current_revision(connection) == "0003"
    with Store(db_url) as store:
        assert store.speedup_checks() == []
        assert [r["job_hash"] for r in store.curves()] == ["old-curve"]
        assert store.finished_result("bench-a") == {}
    engine.dispose()
