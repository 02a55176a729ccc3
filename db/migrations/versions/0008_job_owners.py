"""Jobs have owners: the driver that claimed a job, and the lease it renews.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

- jobs.owner: HOST:PID:RANDOM of the driver that claimed the job last (db/owners.py).
- jobs.lease_until: until when that claim holds unless renewed; None once the job ended.
Rows written before this revision have neither: no driver holds them.
Written out in full rather than importing db.tables (see 0001).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

NAME_LEN = 255


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("owner", sa.String(NAME_LEN), nullable=True))
        batch.add_column(sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("lease_until")
        batch.drop_column("owner")
