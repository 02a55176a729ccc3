"""How a tuned config's curve drew and verified drafts at temperature above 0.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

- tuned_configs.draft_sampling: "sampled" (drafts from the drafter's q, kept with min(1, p/q))
  or "greedy" (its argmax, verified with q one-hot). autotune writes the matching engine
  setting. Nullable: production versions and rows written before this revision record none;
  offline rows written before were all measured the "sampled" way and get it.
Written out in full rather than importing db.tables (see 0001).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TAG_LEN = 64


def upgrade() -> None:
    with op.batch_alter_table("tuned_configs") as batch:
        batch.add_column(sa.Column("draft_sampling", sa.String(TAG_LEN), nullable=True))
    op.execute("UPDATE tuned_configs SET draft_sampling = 'sampled' WHERE source = 'offline'")


def downgrade() -> None:
    with op.batch_alter_table("tuned_configs") as batch:
        batch.drop_column("draft_sampling")
