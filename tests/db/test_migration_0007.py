"""Revision 0007 on both real backends: curves gain a prompt category, select jobs a depth per category.

Fixtures come from test_store.py, so these tests run on the same SQLite file and fresh
PostgreSQL database.
"""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import column, insert, select, table
from support.databases import engine_for

from db.migrate import alembic_config, current_revision, head_revision
from db.rows import CurveRows
from db.store import Store
from db.tables import Base, JobRecord, utc_now
from pipeline.core.types import Curve

CURVES_AT_0006 = table(
    "curves",
    *(
        column(name)
        for name in (
            "job_id",
            "target",
            "drafter",
            "condition",
            "temperature",
            "depth",
            "cond_accept",
            "survival",
            "accept_len",
            "decode_accept_len",
        )
    ),
)


def _curve(category: str, survival: float) -> Curve:
    return Curve(
        condition="default",
        temperature=0.0,
        num_chains=4,
        cond_accept=(survival,),
        survival=(survival,),
        accept_len=(1.0, 1.0 + survival),
        decode_accept_len=(1.0, 1.0 + survival),
        category=category,
    )


def test_curves_before_0007_are_over_every_prompt_and_category_rows_go_on_downgrade(db_url: str) -> None:
    engine = engine_for(db_url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0006")
        job_id = connection.execute(
            insert(JobRecord.__table__)
            .values(
                job_hash="old-curve",
                kind="measure_curve",
                name="m",
                status="done",
                attempts=1,
                config_json="{}",
                result_json="{}",
                created_at=utc_now(),
            )
            .returning(JobRecord.id)
        ).scalar_one()
        connection.execute(
            insert(CURVES_AT_0006).values(
                job_id=job_id,
                target="t",
                drafter="d",
                condition="default",
                temperature=0.0,
                depth=1,
                cond_accept=0.6,
                survival=0.6,
                accept_len=1.6,
                decode_accept_len=1.5,
            )
        )
    with Store(db_url) as store:  # opening upgrades to the head revision
        assert [(r["category"], r["accept_len"]) for r in store.curves()] == [("", 1.6)]
        experiment = store.ensure_experiment(name="e", spec_hash="s", spec_yaml="name: e\n", code_version="v")
        store.link_job(experiment, job_hash="new-curve", kind="measure_curve", name="m", config={})
        store.mark_running("new-curve", mlflow_run_id=None)
        # one job may store the same condition, temperature and depth once per category
        store.mark_done(
            "new-curve",
            result={},
            rows=CurveRows(
                curves=[("t", "d", _curve("", 0.5)), ("t", "d", _curve("code", 0.7)), ("t", "d", _curve("math", 0.3))]
            ),
        )
        assert [r["accept_len"] for r in store.curves(drafter="d")] == [1.6, 1.5]
        assert [(r["category"], r["accept_len"]) for r in store.curves(category="math")] == [("math", 1.3)]
        assert len(store.curves(category=None)) == 4
    with engine.begin() as connection:
        assert current_revision(connection) == head_revision()
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
        command.downgrade(alembic_config(connection), "0006")
        left = connection.execute(select(CURVES_AT_0006.c.accept_len).order_by(CURVES_AT_0006.c.accept_len)).all()
        assert [a for (a,) in left] == [1.5, 1.6]  # the per-category rows are gone, the others kept
        command.upgrade(alembic_config(connection), "head")
    engine.dispose()
