"""Revision 0005 on both real backends: decode_accept_len moves from diagnostics into curves.

Fixtures come from test_store.py, so these tests run on the same SQLite file and fresh
PostgreSQL database.
"""
from __future__ import annotations

import json

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import insert, select
from test_store import db_url, engine_for  # noqa: F401 (db_url is a fixture)

from db.migrate import alembic_config, current_revision, head_revision
from db.store import Store
from db.tables import Base, CurvePoint, Diagnostic, Job, utc_now


def test_database_at_0004_moves_decode_accept_len_into_curves_and_back(db_url: str) -> None:
    engine = engine_for(db_url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0004")
        job_id = connection.execute(insert(Job.__table__).values(
            job_hash="old-curve", kind="measure_curve", name="m", status="done", attempts=1, config_json="{}",
            result_json="{}", created_at=utc_now()).returning(Job.id)).scalar_one()
        place = {"job_id": job_id, "target": "t", "drafter": "d", "condition": "default", "temperature": 0.0}
        for depth, accept_len, walked in ((1, 1.6, 1.5), (2, 1.9, 1.7)):
            connection.execute(insert(CurvePoint.__table__).values(  # the columns revision 0004 has
                **place, depth=depth, cond_accept=0.6, survival=0.6, accept_len=accept_len))
            connection.execute(insert(Diagnostic.__table__).values(
                **place, depth=depth, name="decode_accept_len", value=walked))
        connection.execute(insert(Diagnostic.__table__).values(**place, depth=1, name="rms", value=1.1))
        for name, drafter in (("old-eagle", {"kind": "eagle3", "norm": "pre"}), ("old-small", {"kind": "standalone"}),
                              ("old-default", {"norm": "post"})):
            connection.execute(insert(Job.__table__).values(
                job_hash=name, kind="train_drafter", name=name, status="done", attempts=1,
                config_json=json.dumps({"drafter": drafter, "seed": 0}),
                result_json=json.dumps({"checkpoint_dir": "/x", "metrics": {}}), created_at=utc_now()))

    with Store(db_url) as store:  # opening upgrades to the head revision
        curve = store.curve_rows()
        assert [(r["depth"], r["accept_len"], r["decode_accept_len"]) for r in curve] == [(1, 1.6, 1.5),
                                                                                          (2, 1.9, 1.7)]
        assert [r["name"] for r in store.diagnostic_rows()] == ["rms"]  # only the drift diagnostics stay
        # trained drafters learn their family from their job config
        families = {h: store.finished_result(h)["family"] for h in ("old-eagle", "old-small", "old-default")}
        assert families == {"old-eagle": "eagle3", "old-small": "standalone", "old-default": "eagle3"}

    with engine.begin() as connection:
        assert current_revision(connection) == head_revision()
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
        command.downgrade(alembic_config(connection), "0004")
        names = connection.execute(select(Diagnostic.__table__.c.name, Diagnostic.__table__.c.value)
                                   .order_by(Diagnostic.__table__.c.name, Diagnostic.__table__.c.depth)).all()
        assert [tuple(n) for n in names] == [("decode_accept_len", 1.5), ("decode_accept_len", 1.7), ("rms", 1.1)]
        command.upgrade(alembic_config(connection), "head")
    engine.dispose()
