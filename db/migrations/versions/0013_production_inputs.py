"""What a production version was decided from, as one digest.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06

- tuned_configs.inputs_sha256: the sha256 of a production re-tune's inputs (the metrics' counters,
  the pairing, hardware, condition, temperature, cost ratio, what the choice read from the
  database and the code version), so `autotune --from-metrics` given the same inputs again reuses
  the active version instead of storing another. None on offline versions and on production
  versions written before this revision (a re-tune after the upgrade stores one new version).
Written out in full rather than importing db.tables (see 0001).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

HASH_LEN = 64


def upgrade() -> None:
    with op.batch_alter_table("tuned_configs") as batch:
        batch.add_column(sa.Column("inputs_sha256", sa.String(HASH_LEN), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tuned_configs") as batch:
        batch.drop_column("inputs_sha256")
