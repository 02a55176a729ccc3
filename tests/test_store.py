"""The store on both real backends: a SQLite file, and a fresh PostgreSQL database per test.

PostgreSQL comes from SPECFLEET_TEST_PG_URL (default: trust auth on 127.0.0.1:5432, database
``test``). When it cannot be reached these tests fail under CI and are skipped elsewhere.
"""
from __future__ import annotations

import math
import os
import uuid
from collections.abc import Iterator
from itertools import accumulate

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, make_url, text
from sqlalchemy.exc import OperationalError

from db.engine import normalize_url
from db.migrate import current_revision, head_revision
from db.store import TUNED_KEYS, Store, StoreError
from db.tables import Base
from pipeline.types import Curve

PG_BASE_URL = normalize_url(
    os.environ.get("SPECFLEET_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
)
TABLES = {"experiments", "jobs", "experiment_jobs", "curves", "tuned_configs"}
BEST_KEYS = set(TUNED_KEYS) - {"experiment_id"} | {"created_at"}


def _fresh_pg_database() -> Iterator[str]:
    admin = create_engine(
        PG_BASE_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5}
    )
    name = f"specfleet_t_{uuid.uuid4().hex}"
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as error:
        admin.dispose()
        message = f"PostgreSQL at {make_url(PG_BASE_URL)!r} unreachable: {error.orig}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield make_url(PG_BASE_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    if request.param == "sqlite":
        # A folder that does not exist yet: the store must create it.
        yield f"sqlite:///{tmp_path}/work/specfleet.db"
    else:
        yield from _fresh_pg_database()


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    opened = Store(db_url)
    yield opened
    opened.close()


def _experiment(store: Store, name: str = "quickstart", spec_hash: str = "spec-1") -> int:
    return store.ensure_experiment(
        name=name, spec_hash=spec_hash, spec_yaml=f"name: {name}\n", code_version="abc123"
    )


def _link(store: Store, experiment_id: int, job_hash: str, kind: str = "select") -> None:
    store.link_job(
        experiment_id, job_hash=job_hash, kind=kind, name=f"{kind}-{job_hash}", config={"k": 1}
    )


def _curve(cond_accept: tuple[float, ...], *, temperature: float = 0.0) -> Curve:
    survival = tuple(accumulate(cond_accept, lambda a, b: a * b))
    accept_len = (1.0, *(1.0 + s for s in accumulate(survival)))
    return Curve(
        condition="greedy",
        temperature=temperature,
        num_chains=8,
        cond_accept=cond_accept,
        survival=survival,
        accept_len=accept_len,
    )


def _tuned(experiment_id: int, **overrides: object) -> dict:
    tuned = {
        "experiment_id": experiment_id,
        "target": "tiny-llama",
        "drafter": "eagle-1layer",
        "hardware": "cpu x1 float32",
        "condition": "greedy",
        "temperature": 0.0,
        "depth": 3,
        "accept_len": 2.5,
        "speedup": 1.8,
        "cost_ratio": 0.05,
        "spec_hash": "spec-1",
        "code_version": "abc123",
        "mlflow_run_id": "run-select",
    }
    return {**tuned, **overrides}


def _select_job(store: Store, experiment_id: int, job_hash: str, **tuned: object) -> None:
    _link(store, experiment_id, job_hash)
    store.mark_running(job_hash, mlflow_run_id=f"run-{job_hash}")
    store.mark_done(job_hash, result={"depth": 3}, tuned=_tuned(experiment_id, **tuned))


def _status(store: Store, job_hash: str) -> dict:
    (job,) = [j for j in store.jobs() if j["job_hash"] == job_hash]
    return job


def test_opening_twice_upgrades_once_and_keeps_rows(db_url: str) -> None:
    first = Store(db_url)
    experiment_id = _experiment(first)
    first.close()

    with Store(db_url) as second:
        assert _experiment(second) == experiment_id
        assert [e["id"] for e in second.experiments()] == [experiment_id]

    engine = create_engine(db_url)
    with engine.connect() as connection:
        assert current_revision(connection) == head_revision()
        assert set(inspect(connection).get_table_names()) == TABLES | {"alembic_version"}
    engine.dispose()


def test_migrations_create_exactly_the_orm_tables(store: Store, db_url: str) -> None:
    engine = create_engine(db_url)
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    engine.dispose()
    assert differences == []


def test_ensure_experiment_returns_one_id_per_name_and_spec_hash(store: Store) -> None:
    first = _experiment(store)
    assert _experiment(store) == first
    other_spec = _experiment(store, spec_hash="spec-2")
    other_name = _experiment(store, name="drift")
    assert len({first, other_spec, other_name}) == 3
    assert [e["id"] for e in store.experiments()] == [first, other_spec, other_name]


def test_set_experiment_run(store: Store) -> None:
    experiment_id = _experiment(store)
    store.set_experiment_run(experiment_id, "parent-run")
    assert store.experiments()[0]["mlflow_run_id"] == "parent-run"
    with pytest.raises(StoreError, match="no experiment"):
        store.set_experiment_run(experiment_id + 100, "parent-run")


def test_link_job_is_idempotent_and_jobs_are_shared(store: Store) -> None:
    first = _experiment(store)
    _link(store, first, "job-a")
    _link(store, first, "job-a")
    assert [j["job_hash"] for j in store.jobs(first)] == ["job-a"]

    store.mark_running("job-a", mlflow_run_id="run-a")
    store.mark_done("job-a", result={"ok": True})
    later = _experiment(store, spec_hash="spec-2")
    _link(store, later, "job-a")  # reused by content hash: stays done, not reset to pending

    assert [j["job_hash"] for j in store.jobs()] == ["job-a"]
    assert [j["status"] for j in store.jobs(later)] == ["done"]
    assert store.finished_result("job-a") == {"ok": True}
    counts = [e["job_counts"] for e in store.experiments()]
    assert counts == [{"pending": 0, "running": 0, "done": 1, "failed": 0}] * 2


def test_link_job_to_unknown_experiment_is_refused(store: Store) -> None:
    with pytest.raises(StoreError, match="link_job"):
        _link(store, 12345, "job-a")
    assert store.jobs() == []


def test_job_lifecycle_counts_attempts_and_round_trips_result(store: Store) -> None:
    experiment_id = _experiment(store)
    _link(store, experiment_id, "job-a", kind="train_drafter")
    pending = _status(store, "job-a")
    assert (pending["status"], pending["attempts"], pending["started_at"]) == ("pending", 0, None)
    assert store.finished_result("job-a") is None

    store.mark_running("job-a", mlflow_run_id="run-1")
    running = _status(store, "job-a")
    assert (running["status"], running["attempts"], running["error"]) == ("running", 1, None)
    store.mark_failed("job-a", error="CUDA out of memory")
    failed = _status(store, "job-a")
    assert (failed["status"], failed["error"]) == ("failed", "CUDA out of memory")
    assert failed["duration_s"] >= 0.0
    assert store.finished_result("job-a") is None

    store.mark_running("job-a", mlflow_run_id="run-2")
    result = {"checkpoint_uri": "file:///ckpt/a", "loss": [2.5, 1.25], "nested": {"depth": 4}}
    store.mark_done("job-a", result=result)

    done = _status(store, "job-a")
    assert (done["status"], done["attempts"], done["mlflow_run_id"]) == ("done", 2, "run-2")
    assert done["started_at"].endswith("+00:00") and done["finished_at"].endswith("+00:00")
    assert done["started_at"] <= done["finished_at"] and done["duration_s"] >= 0.0
    assert store.finished_result("job-a") == result
    assert store.finished_result("never-linked") is None


def test_unknown_job_hash_is_refused(store: Store) -> None:
    with pytest.raises(StoreError, match="no job with job_hash nope"):
        store.mark_running("nope", mlflow_run_id=None)


def test_mark_done_stores_one_row_per_depth(store: Store) -> None:
    cond_accept = (0.9, 0.8, 0.7, 0.6)
    _link(store, _experiment(store), "curve-a", kind="measure_curve")
    store.mark_running("curve-a", mlflow_run_id="run-c")
    store.mark_done(
        "curve-a", result={"max_depth": 4}, curve=("tiny-llama", "eagle", _curve(cond_accept))
    )

    rows = store.curve_rows()
    assert [r["depth"] for r in rows] == [1, 2, 3, 4]
    for row in rows:
        depth = row["depth"]
        survival = math.prod(cond_accept[:depth])
        accept_len = 1.0 + sum(math.prod(cond_accept[:j]) for j in range(1, depth + 1))
        assert row["cond_accept"] == pytest.approx(cond_accept[depth - 1])
        assert row["survival"] == pytest.approx(survival)
        assert row["accept_len"] == pytest.approx(accept_len)
        assert (row["target"], row["drafter"]) == ("tiny-llama", "eagle")
        assert row["job_hash"] == "curve-a"
        assert (row["condition"], row["temperature"]) == ("greedy", 0.0)
    assert rows[-1]["accept_len"] == pytest.approx(1 + 0.9 + 0.72 + 0.504 + 0.3024)

    # A retried job replaces its rows instead of adding to them.
    store.mark_done("curve-a", result={}, curve=("tiny-llama", "eagle", _curve((0.5, 0.5))))
    assert [(r["depth"], r["survival"]) for r in store.curve_rows()] == [(1, 0.5), (2, 0.25)]
    assert store.curve_rows(target="other") == []
    assert len(store.curve_rows(target="tiny-llama", drafter="eagle")) == 2


def test_tuned_config_is_stored_and_returned_by_best(store: Store) -> None:
    experiment_id = _experiment(store)
    _select_job(store, experiment_id, "select-a")

    (best,) = store.best()
    assert set(best) == BEST_KEYS
    expected = _tuned(experiment_id)
    assert {k: best[k] for k in BEST_KEYS - {"created_at"}} == {
        k: expected[k] for k in BEST_KEYS - {"created_at"}
    }
    assert best["created_at"].endswith("+00:00")

    # Replaying mark_done keeps one config per select job.
    store.mark_done("select-a", result={"depth": 3}, tuned=_tuned(experiment_id, depth=4))
    assert [b["depth"] for b in store.best()] == [4]


def test_best_returns_newest_config_per_pairing_and_filters(store: Store) -> None:
    old, new = _experiment(store), _experiment(store, spec_hash="spec-2")
    _select_job(store, old, "s-old", depth=2, spec_hash="spec-1")
    _select_job(store, new, "s-new", depth=5, spec_hash="spec-2")
    _select_job(store, old, "s-gpu", hardware="NVIDIA H100 x1 bfloat16", depth=7)
    _select_job(store, old, "s-other-drafter", drafter="medusa", depth=1)
    _select_job(store, old, "s-other-target", target="a-target", depth=6)

    best = store.best()
    pairings = [(b["target"], b["drafter"], b["hardware"], b["depth"]) for b in best]
    assert pairings == [
        ("a-target", "eagle-1layer", "cpu x1 float32", 6),
        ("tiny-llama", "eagle-1layer", "NVIDIA H100 x1 bfloat16", 7),
        ("tiny-llama", "eagle-1layer", "cpu x1 float32", 5),
        ("tiny-llama", "medusa", "cpu x1 float32", 1),
    ]
    assert [b["spec_hash"] for b in best if b["depth"] == 5] == ["spec-2"]
    assert {b["depth"] for b in store.best(target="tiny-llama")} == {7, 5, 1}
    assert [b["depth"] for b in store.best(drafter="medusa")] == [1]
    assert {b["depth"] for b in store.best(target="tiny-llama", drafter="eagle-1layer")} == {7, 5}
    assert store.best(target="absent") == []


@pytest.mark.parametrize(
    "break_tuned",
    [
        pytest.param(lambda t: {k: v for k, v in t.items() if k != "speedup"}, id="missing-key"),
        pytest.param(lambda t: {**t, "experiment_id": 999_999}, id="unknown-experiment"),
    ],
)
def test_failed_mark_done_writes_nothing(store: Store, break_tuned) -> None:
    experiment_id = _experiment(store)
    _link(store, experiment_id, "select-a")
    store.mark_running("select-a", mlflow_run_id="run-a")

    with pytest.raises(StoreError, match="mark_done|tuned config"):
        store.mark_done(
            "select-a",
            result={"depth": 3},
            curve=("tiny-llama", "eagle-1layer", _curve((0.9, 0.8))),
            tuned=break_tuned(_tuned(experiment_id)),
        )

    job = _status(store, "select-a")
    assert (job["status"], job["finished_at"]) == ("running", None)
    assert store.finished_result("select-a") is None
    assert store.curve_rows() == []
    assert store.best() == []


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://specfleet:s3cret@127.0.0.1:1/nowhere",  # nothing listens on port 1
        "postgres://specfleet:s3cret@127.0.0.1:1/nowhere",
        "mysql+nosuchdriver://u:s3cret@db/x",
        "not a url",
    ],
)
def test_bad_url_raises_store_error_naming_it(url: str) -> None:
    with pytest.raises(StoreError) as raised:
        Store(url)
    message = str(raised.value)
    assert message.startswith(f"cannot open database {url.replace('s3cret', '***')}: ")
    assert "s3cret" not in message and "\n" not in message


def test_sqlite_path_under_a_file_raises_store_error(tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    url = f"sqlite:///{blocker}/specfleet.db"
    with pytest.raises(StoreError, match="cannot open database sqlite:///"):
        Store(url)
