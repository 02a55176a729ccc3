"""Diagnostics: named scalars measured beside each curve (long format, one row per depth, name).

Revision ID: 0002
Revises: 0001
Create Date: 2025-12-07

Only adds a table, so existing databases upgrade in place and keep every row. Written out in
full rather than importing db.tables (see 0001); constraint names follow
db.tables.NAMING_CONVENTION.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

NAME_LEN = 255
TAG_LEN = 64


def upgrade() -> None:
    op.create_table(
        "diagnostics",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("target", sa.String(NAME_LEN), nullable=False),
        sa.Column("drafter", sa.String(NAME_LEN), nullable=False),
        sa.Column("condition", sa.String(TAG_LEN), nullable=False),
        sa.Column("temperature", sa.Float(), nullable=False),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(TAG_LEN), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_diagnostics")),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_diagnostics_job_id_jobs")),
        sa.UniqueConstraint(
            "job_id",
            "condition",
            "temperature",
            "depth",
            "name",
            name=op.f("uq_diagnostics_job_id_condition_temperature_depth_name"),
        ),
        sa.CheckConstraint("depth >= 0", name=op.f("ck_diagnostics_depth")),
    )
    op.create_index(op.f("ix_diagnostics_target_drafter"), "diagnostics", ["target", "drafter"])


def downgrade() -> None:
    op.drop_index(op.f("ix_diagnostics_target_drafter"), table_name="diagnostics")
    op.drop_table("diagnostics")
