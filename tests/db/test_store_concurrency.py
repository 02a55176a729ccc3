"""Many processes writing tuned configs at once, on SQLite and PostgreSQL: nothing lost, no error.

Each writer is its own process with its own Store, as concurrent `autotune --from-metrics`
invocations and runs on one database are. They start together (a barrier) and each adds its
versions; afterwards every measurement is stored, the versions of a workload are 1..N with no
gap, and exactly one is active.
"""

from __future__ import annotations

import multiprocessing as mp
import re
import sqlite3
import threading
import time
import traceback
from pathlib import Path

import pytest
from support.paths import DATA

from db.store import Store

CONTEXT = mp.get_context("spawn")  # fresh interpreters: no engine or connection shared with the parent


def _writer(url: str, index: int, versions: int, workloads: int, barrier, report: str) -> None:
    try:
        store = Store(url)  # every writer opens (and, on a new database, upgrades) the schema itself
        barrier.wait(timeout=120)
        for n in range(versions):
            store.add_production_config(
                target="t",
                drafter=f"d{(index + n) % workloads}",
                hardware="cpu",
                condition="default",
                temperature=0.0,
                depth=1 + n % 4,
                accept_len=1.5,
                speedup=1.1,
                cost_ratio=0.1,
                code_version="v",
                notes=f"writer {index} measurement {n}",
            )
        store.close()
    except BaseException:  # reported to the parent, which fails the test with it
        Path(report).write_text(f"writer {index}: {traceback.format_exc()}")


def test_a_new_sqlite_file_opens_while_another_connection_writes_to_it(tmp_path):
    """The race behind an intermittent failure of the 8-command test below: one process reads
    the file's journal mode ("delete") just before another switches it to WAL and begins
    writing. SQLite refuses the switch at once while a write lock is held, busy timeout or not;
    opening waits for the lock instead, and the file ends in WAL mode."""
    path = tmp_path / "new.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE other (x INTEGER)")
    holder.execute("BEGIN IMMEDIATE")  # a write lock on a file still in rollback-journal mode
    timer = threading.Timer(0.5, holder.execute, args=("COMMIT",))
    timer.start()
    started = time.monotonic()
    try:
        with Store(f"sqlite:///{path}") as store:
            assert store.best() == []
    finally:
        timer.join()
        holder.close()
    assert time.monotonic() - started >= 0.45  # it waited for the lock rather than failing or skipping WAL
    check = sqlite3.connect(path)
    assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    check.close()


@pytest.mark.parametrize("writers", [16])  # and 8 concurrent autotune commands below
@pytest.mark.slow
def test_concurrent_writers_lose_nothing(db_url, writers, tmp_path):
    versions, workloads = 3, 2
    barrier = CONTEXT.Barrier(writers)
    procs = [
        CONTEXT.Process(target=_writer, args=(db_url, i, versions, workloads, barrier, str(tmp_path / f"err{i}")))
        for i in range(writers)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    failures = [f.read_text() for f in sorted(tmp_path.glob("err*"))]
    assert not failures, "\n".join(failures)
    assert all(p.exitcode == 0 for p in procs)
    with Store(db_url) as store:
        rows = store.best(history=True)
    assert len(rows) == writers * versions  # every measurement stored
    notes = {r["notes"] for r in rows}
    assert notes == {f"writer {i} measurement {n}" for i in range(writers) for n in range(versions)}
    for w in range(workloads):
        mine = [r for r in rows if r["drafter"] == f"d{w}"]
        assert sorted(r["version"] for r in mine) == list(range(1, len(mine) + 1))  # gap-free
        assert sum(r["active"] for r in mine) == 1
        assert next(r for r in mine if r["active"])["version"] == len(mine)  # the newest is the active one


@pytest.mark.slow
def test_concurrent_autotune_from_metrics_invocations_all_land(db_url, tmp_path):
    """8 `specfleet autotune --from-metrics` processes at once on the same page, as 8 production
    re-tunes of one window are: every one succeeds, and they store one version between them (the
    others reuse it), since the comparison with the active version and the insert take turns."""
    import os
    import subprocess
    import sys

    metrics = DATA / "vllm_metrics" / "dflash_k7_window.prom"
    drafter = tmp_path / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}')
    exe = Path(sys.executable).with_name("specfleet")
    env = {**os.environ, "SPECFLEET_DB": db_url}
    procs = [
        subprocess.Popen(
            [
                str(exe),
                "autotune",
                "--engine",
                "vllm",
                "--from-metrics",
                str(metrics),
                "--cost-ratio",
                "0.1",
                "--drafter-path",
                str(drafter),
                "--method",
                "eagle3",
                "--workdir",
                str(tmp_path),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    outcomes = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    failed = [(rc, err) for rc, err in outcomes if rc != 0 or "Traceback" in err]
    assert not failed, failed
    with Store(db_url) as store:
        rows = store.best(history=True)
    assert [(r["version"], r["active"]) for r in rows] == [(1, True)]
    said = sorted(re.search(r"(stored|reused) production version \d+", err)[0] for _, err in outcomes)
    assert said == ["reused production version 1"] * 7 + ["stored production version 1"], said
