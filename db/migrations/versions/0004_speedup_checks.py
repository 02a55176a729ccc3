"""Speedup checks: the real engine benchmarked at every depth, beside the cost model's prediction.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

One row per (job, condition, temperature, depth); depth 0 is plain decoding, the baseline.
Only adds a table, so existing databases upgrade in place and keep every row. Written out in
full rather than importing db.tables (see 0001); constraint names follow
db.tables.NAMING_CONVENTION.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

NAME_LEN = 255
TAG_LEN = 64


def upgrade() -> None:
    op.create_table(
        "speedup_checks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("target", sa.String(NAME_LEN), nullable=False),
        sa.Column("drafter", sa.String(NAME_LEN), nullable=False),
        sa.Column("condition", sa.String(TAG_LEN), nullable=False),
        sa.Column("temperature", sa.Float(), nullable=False),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("hardware", sa.String(NAME_LEN), nullable=False),
        sa.Column("tokens_per_s", sa.Float(), nullable=False),
        sa.Column("measured_speedup", sa.Float(), nullable=False),
        sa.Column("predicted_speedup", sa.Float(), nullable=False),
        sa.Column("engine_accept_len", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_speedup_checks")),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_speedup_checks_job_id_jobs")),
        sa.UniqueConstraint(
            "job_id",
            "condition",
            "temperature",
            "depth",
            name=op.f("uq_speedup_checks_job_id_condition_temperature_depth"),
        ),
        sa.CheckConstraint("depth >= 0", name=op.f("ck_speedup_checks_depth")),
        sa.CheckConstraint("tokens_per_s > 0", name=op.f("ck_speedup_checks_tokens_per_s")),
    )
    op.create_index(op.f("ix_speedup_checks_target_drafter"), "speedup_checks", ["target", "drafter"])


def downgrade() -> None:
    op.drop_index(op.f("ix_speedup_checks_target_drafter"), table_name="speedup_checks")
    op.drop_table("speedup_checks")
