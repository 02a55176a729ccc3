"""Revision 0005 on both real backends: decode_accept_len moves from diagnostics into curves.

Fixtures come from test_store.py, so these tests run on the same SQLite file and fresh
PostgreSQL database.
"""

from __future__ import annotations

import json

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import column, insert, select, table
from support.databases import engine_for

from db.migrate import alembic_config, current_revision, head_revision
from db.store import Store
from db.tables import Base, Diagnostic, Experiment, JobRecord, TunedConfig, utc_now

# the columns revision 0004 has (the table has gained some since)
CURVES_AT_0004 = table(
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
        )
    ),
)


def test_database_at_0004_moves_decode_accept_len_into_curves_and_back(db_url: str) -> None:
    engine = engine_for(db_url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0004")
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
        place = {"job_id": job_id, "target": "t", "drafter": "d", "condition": "default", "temperature": 0.0}
        for depth, accept_len, walked in ((1, 1.6, 1.5), (2, 1.9, 1.7)):
            connection.execute(
                insert(CURVES_AT_0004).values(
                    **place, depth=depth, cond_accept=0.6, survival=0.6, accept_len=accept_len
                )
            )
            connection.execute(
                insert(Diagnostic.__table__).values(**place, depth=depth, name="decode_accept_len", value=walked)
            )
        connection.execute(insert(Diagnostic.__table__).values(**place, depth=1, name="rms", value=1.1))
        for name, drafter in (
            ("old-eagle", {"kind": "eagle3", "norm": "pre"}),
            ("old-small", {"kind": "standalone"}),
            ("old-default", {"norm": "post"}),
        ):
            connection.execute(
                insert(JobRecord.__table__).values(
                    job_hash=name,
                    kind="train_drafter",
                    name=name,
                    status="done",
                    attempts=1,
                    config_json=json.dumps({"drafter": drafter, "seed": 0}),
                    result_json=json.dumps({"checkpoint_dir": "/x", "metrics": {}}),
                    created_at=utc_now(),
                )
            )
        _offline_choices_at_0004(connection)

    with Store(db_url) as store:  # opening upgrades to the head revision
        curve = store.curves()
        assert [(r["depth"], r["accept_len"], r["decode_accept_len"]) for r in curve] == [(1, 1.6, 1.5), (2, 1.9, 1.7)]
        assert [r["name"] for r in store.diagnostics()] == ["rms"]  # only the drift diagnostics stay
        # trained drafters learn their family from their job config
        families = {h: store.finished_result(h)["family"] for h in ("old-eagle", "old-small", "old-default")}
        assert families == {"old-eagle": "eagle3", "old-small": "standalone", "old-default": "eagle3"}
        # offline versions learn the choice's inputs from their select job and its cost job
        inputs = {r["drafter"]: (r["cost_model"], r["decode_accept_len"], r["pass_cost"]) for r in store.best()}
        assert inputs == {
            "timed": ("timed", 1.6, [1.0, 1.5, 2.0]),
            "given": ("leviathan", 1.7, None),
            "older": (None, None, None),
        }

    with engine.begin() as connection:
        assert current_revision(connection) == head_revision()
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
        command.downgrade(alembic_config(connection), "0004")
        names = connection.execute(
            select(Diagnostic.__table__.c.name, Diagnostic.__table__.c.value).order_by(
                Diagnostic.__table__.c.name, Diagnostic.__table__.c.depth
            )
        ).all()
        assert [tuple(n) for n in names] == [("decode_accept_len", 1.5), ("decode_accept_len", 1.7), ("rms", 1.1)]
        command.upgrade(alembic_config(connection), "head")
    engine.dispose()


def _offline_choices_at_0004(connection) -> None:
    """Three offline versions at revision 0004: a timed choice, a spec-given ratio, one older still."""
    experiment = connection.execute(
        insert(Experiment.__table__)
        .values(name="e", spec_hash="s", spec_yaml="name: e\n", code_version="v", created_at=utc_now())
        .returning(Experiment.id)
    ).scalar_one()
    connection.execute(
        insert(JobRecord.__table__).values(
            job_hash="cost-t",
            kind="profile_cost",
            name="cost-t",
            status="done",
            attempts=1,
            config_json="{}",
            result_json=json.dumps({"cost": {"pass_ms": [4.0, 6.0, 8.0]}}),
            created_at=utc_now(),
        )
    )
    for drafter, choice in (
        ("timed", {"cost_model": "timed", "decode_accept_len": 1.6}),
        ("given", {"cost_model": "leviathan", "decode_accept_len": 1.7}),
        ("older", {}),
    ):
        job_id = connection.execute(
            insert(JobRecord.__table__)
            .values(
                job_hash=f"select-{drafter}",
                kind="select_depth",
                name=drafter,
                status="done",
                attempts=1,
                config_json="{}",
                result_json=json.dumps({"choice": {"depth": 1, **choice}}),
                created_at=utc_now(),
            )
            .returning(JobRecord.id)
        ).scalar_one()
        connection.execute(
            insert(TunedConfig.__table__).values(  # the columns revision 0004 has
                job_id=job_id,
                experiment_id=experiment,
                target="t",
                drafter=drafter,
                hardware="cpu",
                condition="c",
                temperature=0.0,
                depth=1,
                accept_len=1.8,
                speedup=1.1,
                cost_ratio=0.2,
                code_version="v",
                created_at=utc_now(),
                version=1,
                active=True,
                source="offline",
                cost_job_hash="cost-t",
            )
        )
