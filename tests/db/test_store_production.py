"""A production re-tune stored once per distinct input, on both real backends (db/production.py).

Fixtures come from tests/conftest.py: each test runs on a SQLite file and a fresh PostgreSQL
database.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import traceback
from pathlib import Path

import pytest
from test_store import _experiment, _select_job

from db.store import Store, StoreError

RETUNE = dict(
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
    notes="window a",
)


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def _history(store: Store) -> list[tuple]:
    return [(r["version"], r["active"], r["source"], r["notes"]) for r in store.best(history=True)]


def test_the_same_inputs_reuse_the_active_version_and_write_nothing(store: Store) -> None:
    first = store.ensure_production_config({**RETUNE, "inputs_sha256": _digest("a")})
    assert (first.version, first.reused) == (1, False)
    stored = store.best()
    again = store.ensure_production_config({**RETUNE, "inputs_sha256": _digest("a"), "notes": "said otherwise"})
    assert (again.version, again.reused) == (1, True)
    assert store.best() == stored  # nothing written: not the notes, not the time it was stored
    other = store.ensure_production_config({**RETUNE, "inputs_sha256": _digest("b"), "notes": "window b"})
    assert (other.version, other.reused) == (2, False)
    # only the active version counts: the first window again is a new decision over window b's
    back = store.ensure_production_config({**RETUNE, "inputs_sha256": _digest("a"), "notes": "window a again"})
    assert (back.version, back.reused) == (3, False)
    assert _history(store) == [
        (3, True, "production", "window a again"),
        (2, False, "production", "window b"),
        (1, False, "production", "window a"),
    ]


def test_versions_without_a_digest_are_never_reused(store: Store) -> None:
    """An offline version, and a production version stored by add_production_config (as before
    revision 0013), carry no digest: a re-tune over either is a new version."""
    experiment_id = _experiment(store)
    _select_job(store, experiment_id, "s-1", condition="greedy", depth=3)
    assert store.ensure_production_config({**RETUNE, "inputs_sha256": _digest("a")}) == (2, False)
    store.add_production_config(**{**RETUNE, "notes": "no digest"})
    assert store.ensure_production_config({**RETUNE, "inputs_sha256": _digest("a")}) == (4, False)
    assert [(v, a, s) for v, a, s, _ in _history(store)] == [
        (4, True, "production"),
        (3, False, "production"),
        (2, False, "production"),
        (1, False, "offline"),
    ]


def test_each_workload_compares_with_its_own_active_version(store: Store) -> None:
    assert store.ensure_production_config({**RETUNE, "inputs_sha256": _digest("a")}) == (1, False)
    elsewhere = {**RETUNE, "hardware": "NVIDIA H200 x1 bf16", "inputs_sha256": _digest("a")}
    assert store.ensure_production_config(elsewhere) == (1, False)  # another workload: its own version 1
    assert len(store.best(history=True)) == 2


@pytest.mark.parametrize(
    "change,message",
    [
        ({"inputs_sha256": "A" * 64}, "inputs_sha256 must be 64 lowercase hex digits"),
        ({"inputs_sha256": "a" * 63}, "inputs_sha256 must be 64 lowercase hex digits"),
        ({"inputs_sha256": None}, "inputs_sha256 must be 64 lowercase hex digits"),
        ({"mlflow_run": "r"}, r"unknown keys \['mlflow_run'\]"),
        ({"speedup": float("nan")}, "speedup must be a finite number"),
    ],
)
def test_a_bad_production_config_is_refused_and_writes_nothing(store: Store, change, message) -> None:
    with pytest.raises(StoreError, match=message):
        store.ensure_production_config({**RETUNE, "inputs_sha256": _digest("a"), **change})
    with pytest.raises(StoreError, match=r"missing keys \['inputs_sha256'\]"):
        store.ensure_production_config(dict(RETUNE))
    assert store.best(history=True) == []


CONTEXT = mp.get_context("spawn")  # fresh interpreters: no engine or connection shared with the parent


def _retuner(url: str, barrier, out: str) -> None:
    try:
        store = Store(url)
        barrier.wait(timeout=120)
        stored = store.ensure_production_config({**RETUNE, "inputs_sha256": _digest("a")})
        store.close()
        Path(out).write_text(f"{stored.version} {stored.reused}")
    except BaseException:  # reported to the parent, which fails the test with it
        Path(out).write_text(traceback.format_exc())


@pytest.mark.slow
def test_retunes_of_the_same_inputs_at_once_store_one_version(db_url: str, tmp_path) -> None:
    Store(db_url).close()  # the schema first, so the writers race on the version, not on the migration
    writers = 6
    barrier = CONTEXT.Barrier(writers)
    outs = [tmp_path / f"writer-{i}.txt" for i in range(writers)]
    procs = [CONTEXT.Process(target=_retuner, args=(db_url, barrier, str(out))) for out in outs]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    said = sorted(out.read_text() for out in outs)
    assert said == ["1 False"] + ["1 True"] * (writers - 1), said
    with Store(db_url) as store:
        assert [(v, a) for v, a, _, _ in _history(store)] == [(1, True)]
