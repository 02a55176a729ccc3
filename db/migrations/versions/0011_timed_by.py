"""Whose clock timed a tuned config's costs: specfleet's engine or a serving engine's own.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06

- tuned_configs.timed_by: "specfleet" (the profile_cost job) or a serving engine and its release,
  "vllm 0.32.0" (the engine_cost job, with `cost.timed_by: vllm`); None on rows written before
  this revision and on production versions.
Written out in full rather than importing db.tables (see 0001).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

TAG_LEN = 64


def upgrade() -> None:
    with op.batch_alter_table("tuned_configs") as batch:
        batch.add_column(sa.Column("timed_by", sa.String(TAG_LEN), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tuned_configs") as batch:
        batch.drop_column("timed_by")
