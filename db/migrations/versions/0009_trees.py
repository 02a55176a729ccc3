"""Draft trees: acceptance by rank and depth beside each curve, and the tree a tuned config chose.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02

- rank_accepts: one row per (measure job, condition, temperature, depth, rank): the share of
  chain starts whose target token was the drafter's rank-r proposal at that step.
- tree_checks: one row per tree a speedup check ran (position 0: the chosen one), with the chain
  timed beside it.
- tuned_configs.tree_json, tree_decode_accept_len, tree_speedup, tree_chain_speedup,
  tree_all_batches: the tree chosen at batch size 1, what it predicts, and whether every profiled
  batch size chose it; None on rows written before this revision.
Written out in full rather than importing db.tables (see 0001); constraint names follow
db.tables.NAMING_CONVENTION.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

NAME_LEN = 255
TAG_LEN = 64
TREE_COLUMNS = ("tree_decode_accept_len", "tree_speedup", "tree_chain_speedup")


def _measured_at() -> list[sa.Column]:
    """The columns that place a measured value (db.tables.MeasuredAt)."""
    return [
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("target", sa.String(NAME_LEN), nullable=False),
        sa.Column("drafter", sa.String(NAME_LEN), nullable=False),
        sa.Column("condition", sa.String(TAG_LEN), nullable=False),
        sa.Column("temperature", sa.Float(), nullable=False),
        sa.Column("depth", sa.Integer(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "rank_accepts",
        *_measured_at(),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("accept", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rank_accepts")),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_rank_accepts_job_id_jobs")),
        sa.UniqueConstraint(
            "job_id",
            "condition",
            "temperature",
            "depth",
            "rank",
            name=op.f("uq_rank_accepts_job_id_condition_temperature_depth_rank"),
        ),
        sa.CheckConstraint("depth >= 1", name=op.f("ck_rank_accepts_depth")),
        sa.CheckConstraint("rank >= 0", name=op.f("ck_rank_accepts_rank")),
        sa.CheckConstraint("accept >= 0 AND accept <= 1", name=op.f("ck_rank_accepts_accept")),
    )
    op.create_index(op.f("ix_rank_accepts_target_drafter"), "rank_accepts", ["target", "drafter"])
    op.create_table(
        "tree_checks",
        *_measured_at(),
        sa.Column("hardware", sa.String(NAME_LEN), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("tree_json", sa.Text(), nullable=False),
        *(
            sa.Column(name, sa.Float(), nullable=False)
            for name in (
                "tokens_per_s",
                "engine_accept_len",
                "decode_accept_len",
                "predicted_speedup",
                "measured_speedup",
            )
        ),
        sa.Column("chain_depth", sa.Integer(), nullable=False),
        sa.Column("chain_tokens_per_s", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tree_checks")),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_tree_checks_job_id_jobs")),
        sa.UniqueConstraint("job_id", "position", name=op.f("uq_tree_checks_job_id_position")),
        sa.CheckConstraint("depth >= 1", name=op.f("ck_tree_checks_depth")),
        sa.CheckConstraint("position >= 0", name=op.f("ck_tree_checks_position")),
        sa.CheckConstraint("tokens_per_s > 0 AND chain_tokens_per_s > 0", name=op.f("ck_tree_checks_tokens_per_s")),
    )
    op.create_index(op.f("ix_tree_checks_target_drafter"), "tree_checks", ["target", "drafter"])
    with op.batch_alter_table("tuned_configs") as batch:
        batch.add_column(sa.Column("tree_json", sa.Text(), nullable=True))
        for name in TREE_COLUMNS:
            batch.add_column(sa.Column(name, sa.Float(), nullable=True))
        batch.add_column(sa.Column("tree_all_batches", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tuned_configs") as batch:
        for name in ("tree_json", *TREE_COLUMNS, "tree_all_batches"):
            batch.drop_column(name)
    op.drop_index(op.f("ix_tree_checks_target_drafter"), table_name="tree_checks")
    op.drop_table("tree_checks")
    op.drop_index(op.f("ix_rank_accepts_target_drafter"), table_name="rank_accepts")
    op.drop_table("rank_accepts")
