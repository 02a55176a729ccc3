"""Revision 0010 on both real backends: speedup checks name their engine, batch size and run.

Fixtures come from test_store.py, so these tests run on the same SQLite file and fresh
PostgreSQL database.
"""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import column, insert, select, table
from support.databases import engine_for
from test_store import _speedup

from db.migrate import alembic_config, current_revision, head_revision
from db.rows import CheckRows
from db.store import Store
from db.tables import Base, JobRecord, utc_now

CHECKS_AT_0009 = table(
    "speedup_checks",
    *(
        column(name)
        for name in (
            "job_id",
            "target",
            "drafter",
            "hardware",
            "condition",
            "temperature",
            "depth",
            "tokens_per_s",
            "measured_speedup",
            "predicted_speedup",
            "engine_accept_len",
        )
    ),
)


def test_checks_before_0010_are_specfleets_engine_and_served_rows_go_on_downgrade(db_url: str) -> None:
    engine = engine_for(db_url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0009")
        job_id = connection.execute(
            insert(JobRecord.__table__)
            .values(
                job_hash="old-bench",
                kind="measure_speedup",
                name="m",
                status="done",
                attempts=1,
                config_json="{}",
                result_json="{}",
                created_at=utc_now(),
            )
            .returning(JobRecord.id)
        ).scalar_one()
        connection.execute(insert(CHECKS_AT_0009).values(job_id=job_id, **_speedup(1, 50.0)))
    with Store(db_url) as store:  # opening upgrades to the head revision
        (old,) = store.speedup_checks()
        assert (old["engine"], old["batch_size"], old["run"], old["depth_run"]) == ("specfleet", 1, "sweep", None)
        experiment = store.ensure_experiment(name="e", spec_hash="s", spec_yaml="name: e\n", code_version="v")
        store.link_job(experiment, job_hash="served", kind="serve_check", name="s", config={})
        store.mark_running("served", mlflow_run_id=None)
        served = {"engine": "vllm 0.32.0", "depth_run": 1.0}
        # one depth may be stored once per run and batch size
        store.mark_done(
            "served",
            result={},
            rows=CheckRows(
                speedup_checks=[
                    _speedup(1, 30.0, **served, run="sweep", batch_size=1),
                    _speedup(1, 31.0, **served, run="printed", batch_size=1),
                    _speedup(1, 90.0, **served, run="sweep", batch_size=4),
                ]
            ),
        )
        rows = [r for r in store.speedup_checks() if r["job_hash"] == "served"]
        assert [(r["run"], r["batch_size"], r["tokens_per_s"]) for r in rows] == [
            ("printed", 1, 31.0),
            ("sweep", 1, 30.0),
            ("sweep", 4, 90.0),
        ]
    with engine.begin() as connection:
        assert current_revision(connection) == head_revision()
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
        command.downgrade(alembic_config(connection), "0009")
        left = connection.execute(select(CHECKS_AT_0009.c.tokens_per_s)).all()
        assert [t for (t,) in left] == [50.0]  # the serving engine's rows are gone, specfleet's kept
        command.upgrade(alembic_config(connection), "head")
    engine.dispose()
