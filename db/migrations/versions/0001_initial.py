"""Initial schema: experiments, jobs, experiment_jobs, curves, tuned_configs.

Revision ID: 0001
Revises:
Create Date: 2025-11-30

Written out in full rather than importing db.tables: a migration is a frozen snapshot, and the
tables module will move on. Constraint names follow db.tables.NAMING_CONVENTION.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

NAME_LEN = 255
HASH_LEN = 64
TAG_LEN = 64


def _utc() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "experiments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(NAME_LEN), nullable=False),
        sa.Column("spec_hash", sa.String(HASH_LEN), nullable=False),
        sa.Column("spec_yaml", sa.Text(), nullable=False),
        sa.Column("code_version", sa.String(TAG_LEN), nullable=False),
        sa.Column("mlflow_run_id", sa.String(TAG_LEN), nullable=True),
        sa.Column("created_at", _utc(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_experiments")),
        sa.UniqueConstraint("name", "spec_hash", name=op.f("uq_experiments_name_spec_hash")),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_hash", sa.String(HASH_LEN), nullable=False),
        sa.Column("kind", sa.String(TAG_LEN), nullable=False),
        sa.Column("name", sa.String(NAME_LEN), nullable=False),
        sa.Column("status", sa.String(TAG_LEN), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("config_json", sa.Text(), nullable=False),
        sa.Column("result_json", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("mlflow_run_id", sa.String(TAG_LEN), nullable=True),
        sa.Column("started_at", _utc(), nullable=True),
        sa.Column("finished_at", _utc(), nullable=True),
        sa.Column("duration_s", sa.Float(), nullable=True),
        sa.Column("created_at", _utc(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("job_hash", name=op.f("uq_jobs_job_hash")),
        sa.CheckConstraint("status IN ('pending', 'running', 'done', 'failed')", name=op.f("ck_jobs_status")),
        sa.CheckConstraint("attempts >= 0", name=op.f("ck_jobs_attempts")),
    )
    op.create_table(
        "experiment_jobs",
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("experiment_id", "job_id", name=op.f("pk_experiment_jobs")),
        sa.ForeignKeyConstraint(
            ["experiment_id"],
            ["experiments.id"],
            name=op.f("fk_experiment_jobs_experiment_id_experiments"),
        ),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_experiment_jobs_job_id_jobs")),
    )
    op.create_index(op.f("ix_experiment_jobs_job_id"), "experiment_jobs", ["job_id"])
    op.create_table(
        "curves",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("target", sa.String(NAME_LEN), nullable=False),
        sa.Column("drafter", sa.String(NAME_LEN), nullable=False),
        sa.Column("condition", sa.String(TAG_LEN), nullable=False),
        sa.Column("temperature", sa.Float(), nullable=False),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("cond_accept", sa.Float(), nullable=False),
        sa.Column("survival", sa.Float(), nullable=False),
        sa.Column("accept_len", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_curves")),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_curves_job_id_jobs")),
        sa.UniqueConstraint(
            "job_id",
            "condition",
            "temperature",
            "depth",
            name=op.f("uq_curves_job_id_condition_temperature_depth"),
        ),
        sa.CheckConstraint("depth >= 1", name=op.f("ck_curves_depth")),
    )
    op.create_index(op.f("ix_curves_target_drafter"), "curves", ["target", "drafter"])
    op.create_table(
        "tuned_configs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("target", sa.String(NAME_LEN), nullable=False),
        sa.Column("drafter", sa.String(NAME_LEN), nullable=False),
        sa.Column("hardware", sa.String(NAME_LEN), nullable=False),
        sa.Column("condition", sa.String(TAG_LEN), nullable=False),
        sa.Column("temperature", sa.Float(), nullable=False),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("accept_len", sa.Float(), nullable=False),
        sa.Column("speedup", sa.Float(), nullable=False),
        sa.Column("cost_ratio", sa.Float(), nullable=False),
        sa.Column("spec_hash", sa.String(HASH_LEN), nullable=False),
        sa.Column("code_version", sa.String(TAG_LEN), nullable=False),
        sa.Column("mlflow_run_id", sa.String(TAG_LEN), nullable=True),
        sa.Column("created_at", _utc(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tuned_configs")),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_tuned_configs_job_id_jobs")),
        sa.ForeignKeyConstraint(
            ["experiment_id"],
            ["experiments.id"],
            name=op.f("fk_tuned_configs_experiment_id_experiments"),
        ),
        sa.UniqueConstraint("job_id", name=op.f("uq_tuned_configs_job_id")),
        sa.CheckConstraint("depth >= 0", name=op.f("ck_tuned_configs_depth")),
    )
    op.create_index(
        op.f("ix_tuned_configs_target_drafter_hardware"),
        "tuned_configs",
        ["target", "drafter", "hardware"],
    )


def downgrade() -> None:
    op.drop_table("tuned_configs")
    op.drop_table("curves")
    op.drop_table("experiment_jobs")
    op.drop_table("jobs")
    op.drop_table("experiments")
