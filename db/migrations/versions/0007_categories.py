"""Prompt categories: curves per category, and the depth chosen per category.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

- curves.category: the prompts' category from a labelled prompts file, "" for every prompt
  together (all rows written before this revision); the unique key gains it.
- category_depths: one row per (select job, category), the batch-1 depth chosen for that
  category of the job's primary curve.
Existing databases upgrade in place and keep every row. Written out in full rather than
importing db.tables (see 0001); constraint names follow db.tables.NAMING_CONVENTION.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

NAME_LEN = 255
TAG_LEN = 64
OLD_KEY = ("job_id", "condition", "temperature", "depth")
NEW_KEY = ("job_id", "condition", "temperature", "category", "depth")


def _key_name(columns) -> str:
    return "uq_curves_" + "_".join(columns)


def upgrade() -> None:
    with op.batch_alter_table("curves") as batch:
        batch.add_column(sa.Column("category", sa.String(NAME_LEN), nullable=False, server_default=""))
        batch.drop_constraint(_key_name(OLD_KEY), type_="unique")
        batch.create_unique_constraint(_key_name(NEW_KEY), list(NEW_KEY))
    op.create_table(
        "category_depths",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("target", sa.String(NAME_LEN), nullable=False),
        sa.Column("drafter", sa.String(NAME_LEN), nullable=False),
        sa.Column("condition", sa.String(TAG_LEN), nullable=False),
        sa.Column("temperature", sa.Float(), nullable=False),
        sa.Column("category", sa.String(NAME_LEN), nullable=False),
        sa.Column("prompts", sa.Integer(), nullable=False),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("accept_len", sa.Float(), nullable=False),
        sa.Column("decode_accept_len", sa.Float(), nullable=True),
        sa.Column("speedup", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_category_depths")),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_category_depths_job_id_jobs")),
        sa.UniqueConstraint("job_id", "category", name=op.f("uq_category_depths_job_id_category")),
        sa.CheckConstraint("depth >= 0", name=op.f("ck_category_depths_depth")),
        sa.CheckConstraint("prompts >= 1", name=op.f("ck_category_depths_prompts")),
    )
    op.create_index(op.f("ix_category_depths_target_drafter"), "category_depths", ["target", "drafter"])


def downgrade() -> None:
    op.drop_index(op.f("ix_category_depths_target_drafter"), table_name="category_depths")
    op.drop_table("category_depths")
    op.execute("DELETE FROM curves WHERE category <> ''")
    with op.batch_alter_table("curves") as batch:
        batch.drop_constraint(_key_name(NEW_KEY), type_="unique")
        batch.create_unique_constraint(_key_name(OLD_KEY), list(OLD_KEY))
        batch.drop_column("category")
