"""Versioned tuned configs: every decision is a new row, one active version per workload.

Revision ID: 0003
Revises: 0002
Create Date: 2025-12-14

A workload is (target, drafter, hardware, condition). Existing rows become version 1, active,
source 'offline'. A production version has no select job, experiment or spec, so job_id,
experiment_id and spec_hash become nullable (job_id stays unique when present). SQLite cannot
alter columns in place, so the changes go through batch_alter_table, which copies the table
there and issues plain ALTERs on PostgreSQL. Written out in full rather than importing
db.tables (see 0001); constraint names follow db.tables.NAMING_CONVENTION.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

HASH_LEN = 64
TAG_LEN = 64

NEW_COLUMNS = (
    ("version", sa.Integer()),
    ("active", sa.Boolean()),
    ("source", sa.String(TAG_LEN)),
    ("schedule_json", sa.Text()),
    ("curve_job_hash", sa.String(HASH_LEN)),
    ("cost_job_hash", sa.String(HASH_LEN)),
    ("drafter_job_hash", sa.String(HASH_LEN)),
    ("notes", sa.Text()),
)
REQUIRED = ("version", "active", "source")
NOW_OPTIONAL = (
    ("job_id", sa.Integer()),
    ("experiment_id", sa.Integer()),
    ("spec_hash", sa.String(HASH_LEN)),
)
WORKLOAD = ["target", "drafter", "hardware", "condition"]


def upgrade() -> None:
    # Added nullable first, filled for the existing rows, then made NOT NULL: no server
    # default is left behind, so the table matches db.tables exactly.
    with op.batch_alter_table("tuned_configs") as batch:
        for name, type_ in NEW_COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))
    tuned = sa.table("tuned_configs", sa.column("version"), sa.column("active"), sa.column("source"))
    op.execute(tuned.update().values(version=1, active=True, source="offline"))

    with op.batch_alter_table("tuned_configs") as batch:
        for name in REQUIRED:
            batch.alter_column(name, existing_type=dict(NEW_COLUMNS)[name], nullable=False)
        for name, type_ in NOW_OPTIONAL:
            batch.alter_column(name, existing_type=type_, nullable=True)
        batch.create_check_constraint(op.f("ck_tuned_configs_version"), "version >= 1")
        batch.create_check_constraint(op.f("ck_tuned_configs_source"), "source IN ('offline', 'production')")
        batch.create_check_constraint(
            op.f("ck_tuned_configs_offline_job"), "source = 'production' OR job_id IS NOT NULL"
        )
        batch.create_unique_constraint(
            op.f("uq_tuned_configs_target_drafter_hardware_condition_version"),
            [*WORKLOAD, "version"],
        )
    op.create_index(
        op.f("uq_tuned_configs_active_workload"),
        "tuned_configs",
        WORKLOAD,
        unique=True,
        postgresql_where=sa.text("active"),
        sqlite_where=sa.text("active"),
    )


def downgrade() -> None:
    # Only the active version of each workload fits the old one-row-per-job shape.
    op.drop_index(op.f("uq_tuned_configs_active_workload"), table_name="tuned_configs")
    tuned = sa.table("tuned_configs", sa.column("active"), sa.column("job_id"))
    op.execute(tuned.delete().where(sa.or_(tuned.c.active == sa.false(), tuned.c.job_id.is_(None))))
    with op.batch_alter_table("tuned_configs") as batch:
        batch.drop_constraint(op.f("uq_tuned_configs_target_drafter_hardware_condition_version"), type_="unique")
        for name in ("version", "source", "offline_job"):
            batch.drop_constraint(op.f(f"ck_tuned_configs_{name}"), type_="check")
        for name, type_ in NOW_OPTIONAL:
            batch.alter_column(name, existing_type=type_, nullable=False)
        for name, _ in reversed(NEW_COLUMNS):
            batch.drop_column(name)
