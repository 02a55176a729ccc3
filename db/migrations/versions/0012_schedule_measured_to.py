"""How far a tuned config's schedule was measured.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06

- tuned_configs.schedule_measured_to: the largest batch size whose depth was chosen from costs
  timed at that size; the schedule's ranges above it carry that depth without a measurement
  (extrapolated). None on rows written before this revision and on rows without a schedule.
Written out in full rather than importing db.tables (see 0001).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tuned_configs") as batch:
        batch.add_column(sa.Column("schedule_measured_to", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tuned_configs") as batch:
        batch.drop_column("schedule_measured_to")
