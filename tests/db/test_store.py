"""The store on both real backends: a SQLite file, and a fresh PostgreSQL database per test.

PostgreSQL comes from SPECFLEET_TEST_PG_URL (default: trust auth on 127.0.0.1:5432, database
``test``). When it cannot be reached these tests fail under CI and are skipped elsewhere.
"""

from __future__ import annotations

import dataclasses
import math
from itertools import accumulate

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, insert, inspect
from support.databases import engine_for

from db.migrate import alembic_config, current_revision, head_revision
from db.rows import CheckRows, ChoiceRows, CurveRows
from db.store import DIAGNOSTIC_KEYS, TUNED_KEYS, Store, StoreError
from db.tables import Base, JobRecord, utc_now
from pipeline.core.types import Curve

TABLES = {
    "experiments",
    "jobs",
    "experiment_jobs",
    "curves",
    "diagnostics",
    "speedup_checks",
    "tuned_configs",
    "category_depths",
    "rank_accepts",
    "tree_checks",
}
VERSION_KEYS = {
    "version",
    "active",
    "source",
    "schedule",
    "curve_job_hash",
    "cost_job_hash",
    "drafter_job_hash",
    "notes",
    "job_hash",
    "decode_accept_len",
    "cost_model",
    "pass_cost",
    "draft_sampling",
    "timed_by",
    "block_drafting",
    "schedule_measured_to",
    "tree",
    "tree_decode_accept_len",
    "tree_speedup",
    "tree_chain_speedup",
    "tree_all_batches",
}
BEST_KEYS = set(TUNED_KEYS) - {"experiment_id"} | {"created_at"} | VERSION_KEYS


def _experiment(store: Store, name: str = "quickstart", spec_hash: str = "spec-1") -> int:
    return store.ensure_experiment(name=name, spec_hash=spec_hash, spec_yaml=f"name: {name}\n", code_version="abc123")


def _link(store: Store, experiment_id: int, job_hash: str, kind: str = "select") -> None:
    store.link_job(experiment_id, job_hash=job_hash, kind=kind, name=f"{kind}-{job_hash}", config={"k": 1})


def _curve(cond_accept: tuple[float, ...], *, condition: str = "greedy", temperature: float = 0.0) -> Curve:
    survival = tuple(accumulate(cond_accept, lambda a, b: a * b))
    accept_len = (1.0, *(1.0 + s for s in accumulate(survival)))
    return Curve(
        condition=condition,
        temperature=temperature,
        num_chains=8,
        cond_accept=cond_accept,
        survival=survival,
        accept_len=accept_len,
    )


def _diag(name: str, depth: int, value: float, condition: str = "greedy", **more) -> dict:
    return {
        "target": "tiny-llama",
        "drafter": "eagle",
        "condition": condition,
        "temperature": 0.0,
        "depth": depth,
        "name": name,
        "value": value,
        **more,
    }


def _speedup(depth: int, tokens_per_s: float, base_tokens_per_s: float = 40.0, **more) -> dict:
    """One depth of an engine benchmark; measured_speedup is relative to base_tokens_per_s."""
    return {
        "target": "tiny-llama",
        "drafter": "eagle",
        "hardware": "cpu x1 float32",
        "condition": "greedy",
        "temperature": 0.0,
        "depth": depth,
        "tokens_per_s": tokens_per_s,
        "measured_speedup": tokens_per_s / base_tokens_per_s,
        "predicted_speedup": 1.0 + 0.25 * depth,
        "engine_accept_len": 1.0 + 0.5 * depth,
        **more,
    }


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
    store.mark_done(job_hash, result={"depth": 3}, rows=ChoiceRows(tuned=_tuned(experiment_id, **tuned)))


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


def test_a_plans_jobs_are_linked_in_one_write_in_chunks_and_done_ones_stay_done(store: Store) -> None:
    first = _experiment(store)
    _link(store, first, "job-7")
    store.mark_running("job-7", mlflow_run_id="run-7")
    store.mark_done("job-7", result={"ok": True})
    later = _experiment(store, spec_hash="spec-2")
    jobs = [
        {"job_hash": f"job-{i}", "kind": "select_depth", "name": f"s{i}", "config": {"seed": i}} for i in range(1203)
    ]
    store.link_jobs(later, jobs)  # in chunks
    store.link_jobs(later, jobs)  # again: nothing doubles
    linked = store.jobs(later)
    assert len(linked) == 1203 and len({j["job_hash"] for j in linked}) == 1203
    assert {j["status"] for j in linked if j["job_hash"] != "job-7"} == {"pending"}
    assert next(j for j in linked if j["job_hash"] == "job-7")["status"] == "done"
    assert store.job_config("job-1202") == {"seed": 1202}


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


def _measure_job(store: Store, job_hash: str = "curve-a") -> None:
    _link(store, _experiment(store), job_hash, kind="measure_curve")
    store.mark_running(job_hash, mlflow_run_id=f"run-{job_hash}")


def test_mark_done_stores_one_row_per_depth_and_condition(store: Store) -> None:
    cond_accept = (0.9, 0.8, 0.7, 0.6)
    _measure_job(store)
    store.mark_done(
        "curve-a",
        result={"max_depth": 4},
        rows=CurveRows(
            curves=[
                ("tiny-llama", "eagle", _curve(cond_accept)),
                ("tiny-llama", "eagle", _curve((0.5, 0.4), condition="sampled", temperature=1.0)),
                ("tiny-llama", "eagle", _curve((0.6,), condition="sampled", temperature=0.7)),
            ]
        ),
    )

    rows = store.curves(condition="greedy")
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

    keys = [(r["condition"], r["temperature"], r["depth"]) for r in store.curves()]
    assert keys == [("greedy", 0.0, d) for d in (1, 2, 3, 4)] + [
        ("sampled", 0.7, 1),
        ("sampled", 1.0, 1),
        ("sampled", 1.0, 2),
    ]
    sampled = store.curves(target="tiny-llama", drafter="eagle", condition="sampled")
    assert [r["survival"] for r in sampled] == pytest.approx([0.6, 0.5, 0.2])
    assert set(sampled[0]) == set(rows[0])  # the output keys do not depend on the filter

    # A retried job replaces all its rows instead of adding to them.
    store.mark_done("curve-a", result={}, rows=CurveRows(curves=[("tiny-llama", "eagle", _curve((0.5, 0.5)))]))
    assert [(r["depth"], r["survival"]) for r in store.curves()] == [(1, 0.5), (2, 0.25)]
    assert store.curves(condition="sampled") == []
    assert store.curves(target="other") == []


def test_diagnostics_round_trip_sorted_filtered_and_replaced(store: Store) -> None:
    _measure_job(store)
    _measure_job(store, "curve-b")
    given = [
        _diag("sink_attn", 2, 0.25),
        _diag("rms", 2, 1.5),
        _diag("rms", 1, 1.25),
        _diag("attn_entropy", 0, 3.0),  # a whole-curve value has depth 0
        _diag("rms", 1, 2.0, condition="sampled", temperature=1.0),
        _diag("rms_low", 1, 0.5, drafter="medusa"),
    ]
    store.mark_done("curve-a", result={}, rows=CurveRows(curves=[], diagnostics=given))
    store.mark_done("curve-b", result={}, rows=CurveRows(diagnostics=[_diag("rms", 1, 9.0, target="a-target")]))

    rows = store.diagnostics()
    assert all(set(r) == {*DIAGNOSTIC_KEYS, "job_hash"} for r in rows)
    assert [(r["target"], r["drafter"], r["condition"], r["name"], r["depth"]) for r in rows] == [
        ("a-target", "eagle", "greedy", "rms", 1),
        ("tiny-llama", "eagle", "greedy", "attn_entropy", 0),
        ("tiny-llama", "eagle", "greedy", "rms", 1),
        ("tiny-llama", "eagle", "greedy", "rms", 2),
        ("tiny-llama", "eagle", "greedy", "sink_attn", 2),
        ("tiny-llama", "eagle", "sampled", "rms", 1),
        ("tiny-llama", "medusa", "greedy", "rms_low", 1),
    ]
    mine = [{k: r[k] for k in DIAGNOSTIC_KEYS} for r in rows if r["job_hash"] == "curve-a"]
    key = lambda d: (d["drafter"], d["condition"], d["name"], d["depth"])  # noqa: E731
    assert sorted(mine, key=key) == sorted(given, key=key)
    assert [r["value"] for r in store.diagnostics(condition="sampled")] == [2.0]
    assert [r["job_hash"] for r in store.diagnostics(target="a-target")] == ["curve-b"]
    assert [r["name"] for r in store.diagnostics(drafter="medusa")] == ["rms_low"]

    # A repeated mark_done replaces this job's diagnostics and leaves other jobs' alone;
    # diagnostics=None leaves them as they are.
    store.mark_done("curve-a", result={}, rows=CurveRows(diagnostics=[_diag("rms_fused", 3, 0.75)]))
    store.mark_done("curve-a", result={})
    assert [(r["job_hash"], r["name"]) for r in store.diagnostics()] == [
        ("curve-b", "rms"),
        ("curve-a", "rms_fused"),
    ]


def test_the_choice_keeps_what_it_maximised_and_its_cost_model(store: Store) -> None:
    experiment_id = _experiment(store)
    _select_job(
        store,
        experiment_id,
        "select-b",
        drafter="other",
        decode_accept_len=1.8,
        cost_model="timed",
        pass_cost=[1.0, 1.5, 1.9, 2.2],
        block_drafting="depth",
    )
    (timed,) = store.best(drafter="other")
    assert (timed["decode_accept_len"], timed["cost_model"], timed["pass_cost"]) == (1.8, "timed", [1.0, 1.5, 1.9, 2.2])
    assert timed["block_drafting"] == "depth"  # a DFlash curve measured on blocks of depth + 1
    for bad in (
        {"block_drafting": "half"},
        {"cost_model": "guess"},
        {"pass_cost": [1.0]},
        {"pass_cost": [1.0, float("nan")]},
        {"decode_accept_len": float("inf")},
    ):
        with pytest.raises(StoreError, match=next(iter(bad))):
            _select_job(store, experiment_id, "select-bad", drafter="bad", **bad)
    assert store.best(drafter="bad") == []


def test_trees_are_stored_beside_curves_and_tuned_configs(store: Store) -> None:
    _measure_job(store, "curve-t")
    accepts = [
        {
            "target": "tiny-llama",
            "drafter": "eagle-1layer",
            "condition": "greedy",
            "temperature": 0.0,
            "depth": d,
            "rank": r,
            "accept": share,
        }
        for d, r, share in ((1, 0, 0.7), (1, 1, 0.2), (2, 0, 0.6))
    ]
    store.mark_done("curve-t", result={}, rows=CurveRows(rank_accepts=accepts))
    rows = store.rank_accepts(target="tiny-llama")
    assert [(r["depth"], r["rank"], r["accept"], r["job_hash"]) for r in rows] == [
        (1, 0, 0.7, "curve-t"),
        (1, 1, 0.2, "curve-t"),
        (2, 0, 0.6, "curve-t"),
    ]
    for bad, field in (({"rank": -1}, "rank"), ({"accept": 1.5}, "accept"), ({"depth": 0}, "depth")):
        _measure_job(store, "curve-bad")
        with pytest.raises(StoreError, match=field):
            store.mark_done("curve-bad", result={}, rows=CurveRows(rank_accepts=[{**accepts[0], **bad}]))
        assert _status(store, "curve-bad")["status"] == "running"  # nothing half-written
    experiment_id = _experiment(store)
    _select_job(
        store,
        experiment_id,
        "select-t",
        drafter="treed",
        tree=[[0], [1], [0, 0]],
        tree_decode_accept_len=2.1,
        tree_speedup=1.9,
        tree_chain_speedup=1.7,
    )
    (best,) = store.best(drafter="treed")
    assert (best["tree"], best["tree_speedup"], best["tree_chain_speedup"]) == ([[0], [1], [0, 0]], 1.9, 1.7)
    with pytest.raises(StoreError, match="tree"):
        _select_job(store, experiment_id, "select-bad-tree", drafter="bad", tree=[[0], []])
    assert store.best(drafter="bad") == []
    # the engine's check of that tree: `best` shows its measured gain over the chain timed beside it
    assert store.with_tree_checks(store.best(drafter="treed"))[0]["tree_measured_over_chain"] is None
    check = {
        "target": "tiny-llama",
        "drafter": "treed",
        "condition": "greedy",
        "temperature": 0.0,
        "hardware": "cpu x1 float32",
        "depth": 2,
        "position": 0,
        "tree_json": "[[0], [1], [0, 0]]",
        "tokens_per_s": 60.0,
        "engine_accept_len": 2.0,
        "decode_accept_len": 2.1,
        "predicted_speedup": 1.9,
        "measured_speedup": 1.5,
        "chain_depth": 2,
        "chain_tokens_per_s": 50.0,
    }
    _link(store, experiment_id, "speedup-t", kind="measure_speedup")
    store.mark_running("speedup-t", mlflow_run_id="run-speedup-t")
    with pytest.raises(StoreError, match="tree_checks.0. of job speedup-t: tree must be"):
        store.mark_done("speedup-t", result={}, rows=CheckRows(tree_checks=[{**check, "tree_json": "[[0], [-1]]"}]))
    store.mark_done(
        "speedup-t",
        result={},
        rows=CheckRows(tree_checks=[check, {**check, "position": 1, "tree_json": "[[0]]", "depth": 1}]),
    )
    assert [r["tree"] for r in store.tree_checks(drafter="treed")] == [[[0], [1], [0, 0]], [[0]]]
    (row,) = store.with_tree_checks(store.best(drafter="treed"))
    assert row["tree_measured_over_chain"] == pytest.approx(60.0 / 50.0)


def test_tuned_config_is_stored_and_returned_by_best(store: Store) -> None:
    experiment_id = _experiment(store)
    _select_job(store, experiment_id, "select-a")

    (best,) = store.best()
    assert set(best) == BEST_KEYS
    expected = _tuned(experiment_id)
    given = set(TUNED_KEYS) - {"experiment_id"}
    assert {k: best[k] for k in given} == {k: expected[k] for k in given}
    assert best["created_at"].endswith("+00:00")
    assert (best["version"], best["active"], best["source"], best["job_hash"]) == (1, True, "offline", "select-a")
    assert {k: best[k] for k in VERSION_KEYS - {"version", "active", "source", "job_hash"}} == {
        k: None for k in VERSION_KEYS - {"version", "active", "source", "job_hash"}
    }

    # Versions are immutable: replaying mark_done keeps the job's one version as it was.
    store.mark_done("select-a", result={"depth": 3}, rows=ChoiceRows(tuned=_tuned(experiment_id, depth=4)))
    assert [(b["version"], b["depth"]) for b in store.best(history=True)] == [(1, 3)]


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


def _good_done(experiment_id: int) -> dict:
    """mark_done's rows that succeed, of each kind; each case below breaks one part of them."""
    return {
        "curves": [
            ("tiny-llama", "eagle-1layer", _curve((0.9, 0.8))),
            ("tiny-llama", "eagle-1layer", _curve((0.7,), condition="sampled", temperature=1.0)),
        ],
        "diagnostics": [_diag("rms", 1, 1.5), _diag("attn_entropy", 0, 2.0)],
        "speedup_checks": [_speedup(0, 40.0), _speedup(1, 52.0), _speedup(2, 58.0)],
        "tuned": _tuned(experiment_id),
    }


def _rows(args: dict, *kinds: type) -> list:
    """The rows objects of `kinds` built from _good_done's fields."""
    return [kind(**{f: args[f] for f in kind.__dataclass_fields__ if f in args}) for kind in kinds]


def _without(entry: dict, key: str) -> dict:
    return {k: v for k, v in entry.items() if k != key}


BROKEN_DONE = {
    "tuned-missing-key": (lambda a: {**a, "tuned": _without(a["tuned"], "speedup")}, "tuned"),
    "tuned-unknown-experiment": (
        lambda a: {**a, "tuned": {**a["tuned"], "experiment_id": 999_999}},
        "mark_done refused",
    ),
    "diagnostic-missing-value": (
        lambda a: {**a, "diagnostics": [*a["diagnostics"], _without(_diag("rms", 2, 0), "value")]},
        r"diagnostics\[2\] of job select-a: missing keys \['value'\]",
    ),
    "diagnostic-nan": (lambda a: {**a, "diagnostics": [_diag("rms", 2, math.nan)]}, "value must be a finite"),
    "diagnostic-negative-depth": (
        lambda a: {**a, "diagnostics": [_diag("rms", -1, 1.0)]},
        "depth must be an integer >= 0",
    ),
    "diagnostic-long-name": (lambda a: {**a, "diagnostics": [_diag("x" * 65, 1, 1.0)]}, "name must be a string"),
    "diagnostic-repeated": (
        lambda a: {**a, "diagnostics": [_diag("rms", 1, 1.0), _diag("rms", 1, 2.0)]},
        "mark_done refused",
    ),
    "curve-condition-repeated": (lambda a: {**a, "curves": [a["curves"][0], a["curves"][0]]}, "mark_done refused"),
    "curve-not-a-triple": (lambda a: {**a, "curves": [_curve((0.9,))]}, r"curves\[0\]"),
    "curve-not-finite": (
        lambda a: {**a, "curves": [("t", "d", _curve((float("nan"), 0.5)))]},
        "cond_accept must be a finite",
    ),
    "curve-walk-too-short": (
        lambda a: {**a, "curves": [("t", "d", dataclasses.replace(_curve((0.9, 0.5)), decode_accept_len=(1.0,)))]},
        "decode_accept_len, if any",
    ),
}


@pytest.mark.parametrize("case", BROKEN_DONE)
def test_failed_mark_done_writes_nothing(store: Store, case: str) -> None:
    break_args, message = BROKEN_DONE[case]
    experiment_id = _experiment(store)
    _link(store, experiment_id, "select-a")
    store.mark_running("select-a", mlflow_run_id="run-a")

    args = break_args(_good_done(experiment_id))
    kind = ChoiceRows if case.startswith("tuned") else CurveRows  # the rows the case breaks
    (rows,) = _rows(args, kind)
    with pytest.raises(StoreError, match=message):
        store.mark_done("select-a", result={"depth": 3}, rows=rows)

    job = _status(store, "select-a")
    assert (job["status"], job["finished_at"]) == ("running", None)
    assert store.finished_result("select-a") is None
    assert store.curves() == []
    assert store.diagnostics() == []
    assert store.speedup_checks() == []
    assert store.best() == []


def test_failed_repeat_of_mark_done_keeps_the_earlier_rows(store: Store) -> None:
    experiment_id = _experiment(store)
    _link(store, experiment_id, "select-a")
    for rows in _rows(_good_done(experiment_id), CheckRows, ChoiceRows, CurveRows):
        store.mark_done("select-a", result={"depth": 3}, rows=rows)
    before = (store.curves(), store.diagnostics(), store.best(), store.speedup_checks())

    bad = {**_good_done(experiment_id), "curves": [], "diagnostics": [_without(_diag("rms", 1, 0), "value")]}
    with pytest.raises(StoreError, match="missing keys"):
        store.mark_done("select-a", result={"depth": 9}, rows=_rows(bad, CurveRows)[0])

    after = (store.curves(), store.diagnostics(), store.best(), store.speedup_checks())
    assert after == before
    assert store.finished_result("select-a") == {"depth": 3}
    assert len(before[0]) == 3 and len(before[1]) == 2 and len(before[3]) == 3


def test_database_at_revision_0001_upgrades_in_place(db_url: str) -> None:
    engine = engine_for(db_url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0001")
        assert "diagnostics" not in inspect(connection).get_table_names()
        job = {
            "job_hash": "old-job",
            "kind": "measure_curve",
            "name": "measure-old",
            "status": "done",
            "attempts": 1,
            "config_json": "{}",
            "result_json": '{"a": 1}',
            "created_at": utc_now(),
        }
        connection.execute(insert(JobRecord.__table__).values(**job))

    with Store(db_url) as store:
        assert [(j["job_hash"], j["status"]) for j in store.jobs()] == [("old-job", "done")]
        assert store.finished_result("old-job") == {"a": 1}
        store.mark_done("old-job", result={"a": 2}, rows=CurveRows(diagnostics=[_diag("rms", 1, 1.5)]))
        assert [r["job_hash"] for r in store.diagnostics()] == ["old-job"]

    with engine.connect() as connection:
        assert current_revision(connection) == head_revision()
        assert set(inspect(connection).get_table_names()) == TABLES | {"alembic_version"}
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
    engine.dispose()


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
