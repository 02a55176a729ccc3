"""Serving engines in the speedup checks: which engine ran, at which batch size, with which config.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06

- speedup_checks.engine: "specfleet" for specfleet's own engine benchmark (measure_speedup), else
  the serving engine and its release ("vllm 0.32.0", serve_check).
- speedup_checks.batch_size: the batch size the engine decoded at (1 for specfleet's engine).
- speedup_checks.run: "sweep" for a constant depth of the sweep, "printed" for the config
  `specfleet autotune` prints for the choice (a depth per batch size).
- speedup_checks.depth_run: the depth the engine actually drafted (its draft tokens per draft);
  None where the engine does not count it (specfleet's).
The unique key gains run and batch_size (named uq_speedup_checks_point). Rows written before this
revision are specfleet's engine at batch size 1, swept.
Written out in full rather than importing db.tables (see 0001).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

NAME_LEN = 255
TAG_LEN = 64
OLD_KEY = ("job_id", "condition", "temperature", "depth")
NEW_KEY = ("job_id", "condition", "temperature", "run", "batch_size", "depth")
NEW_NAME = "uq_speedup_checks_point"  # the convention's name for NEW_KEY passes PostgreSQL's 63 characters


def upgrade() -> None:
    with op.batch_alter_table("speedup_checks") as batch:
        batch.add_column(sa.Column("engine", sa.String(NAME_LEN), nullable=False, server_default="specfleet"))
        batch.add_column(sa.Column("batch_size", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("run", sa.String(TAG_LEN), nullable=False, server_default="sweep"))
        batch.add_column(sa.Column("depth_run", sa.Float(), nullable=True))
        batch.drop_constraint("uq_speedup_checks_" + "_".join(OLD_KEY), type_="unique")
        batch.create_unique_constraint(op.f(NEW_NAME), list(NEW_KEY))
        batch.create_check_constraint(op.f("ck_speedup_checks_batch_size"), "batch_size >= 1")


def downgrade() -> None:
    with op.batch_alter_table("speedup_checks") as batch:
        batch.execute("DELETE FROM speedup_checks WHERE engine <> 'specfleet' OR run <> 'sweep' OR batch_size <> 1")
        batch.drop_constraint(op.f("ck_speedup_checks_batch_size"), type_="check")
        batch.drop_constraint(op.f(NEW_NAME), type_="unique")
        batch.create_unique_constraint("uq_speedup_checks_" + "_".join(OLD_KEY), list(OLD_KEY))
        batch.drop_column("depth_run")
        batch.drop_column("run")
        batch.drop_column("batch_size")
        batch.drop_column("engine")
