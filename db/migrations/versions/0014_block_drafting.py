"""How a DFlash drafter's depths below its trained block were drafted.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07

- tuned_configs.block_drafting: for a DFlash drafter, "trained" (a depth k verified the first k
  drafts of the whole trained block, as vLLM 0.32+ drafts) or "depth" (a block of k + 1, as SGLang,
  TensorRT-LLM and older vLLM draft), so autotune says where an engine drafts otherwise than the
  curve measured. None for every other drafter, on production versions, and on rows written before
  this revision (whose DFlash curves were all measured on whole blocks).
Written out in full rather than importing db.tables (see 0001).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

TAG_LEN = 64


def upgrade() -> None:
    with op.batch_alter_table("tuned_configs") as batch:
        batch.add_column(sa.Column("block_drafting", sa.String(TAG_LEN), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tuned_configs") as batch:
        batch.drop_column("block_drafting")
