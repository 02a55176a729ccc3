"""Revision 0006 on both real backends: tuned configs record how their curve drew drafts.

Fixtures come from test_store.py, so these tests run on the same SQLite file and fresh
PostgreSQL database.
"""

from __future__ import annotations

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import insert
from support.databases import engine_for

from db.migrate import alembic_config, current_revision, head_revision
from db.store import Store, StoreError
from db.tables import Base, Experiment, JobRecord, TunedConfig, utc_now


def test_offline_rows_before_0006_were_measured_with_sampled_drafts(db_url: str) -> None:
    engine = engine_for(db_url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0005")
        experiment = connection.execute(
            insert(Experiment.__table__)
            .values(name="e", spec_hash="s", spec_yaml="name: e\n", code_version="v", created_at=utc_now())
            .returning(Experiment.id)
        ).scalar_one()
        select_job = connection.execute(
            insert(JobRecord.__table__)
            .values(
                job_hash="select-old",
                kind="select_depth",
                name="s",
                status="done",
                attempts=1,
                config_json="{}",
                result_json="{}",
                created_at=utc_now(),
            )
            .returning(JobRecord.id)
        ).scalar_one()
        for drafter, source, job in (("offline", "offline", select_job), ("prod", "production", None)):
            connection.execute(
                insert(TunedConfig.__table__).values(  # the columns revision 0005 has
                    job_id=job,
                    experiment_id=experiment,
                    target="t",
                    drafter=drafter,
                    hardware="cpu",
                    condition="c",
                    temperature=1.0,
                    depth=1,
                    accept_len=1.8,
                    speedup=1.1,
                    cost_ratio=0.2,
                    code_version="v",
                    created_at=utc_now(),
                    version=1,
                    active=True,
                    source=source,
                )
            )
    with Store(db_url) as store:  # opening upgrades to the head revision
        assert {r["drafter"]: r["draft_sampling"] for r in store.best()} == {"offline": "sampled", "prod": None}
        with pytest.raises(StoreError, match="draft_sampling must be one of"):
            store.add_production_config(
                target="t",
                drafter="x",
                hardware="cpu",
                condition="c",
                temperature=1.0,
                depth=1,
                accept_len=1.5,
                speedup=1.1,
                cost_ratio=0.2,
                code_version="v",
                draft_sampling="argmax",
            )
    with engine.begin() as connection:
        assert current_revision(connection) == head_revision()
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
        command.downgrade(alembic_config(connection), "0005")
        assert current_revision(connection) == "0005"
