"""What the depth choice maximised and how it costed a pass, stored where it belongs.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

- curves.decode_accept_len: a decoder's tokens per target pass at each depth, the quantity the
  depth choice maximises. It used to be stored as a diagnostic named "decode_accept_len"; those
  rows move into the new column and leave the diagnostics table.
- finished train_drafter results get the drafter `family` their job config names (autotune
  asks the family how to serve a drafter; results stored before this revision lacked it).
- tuned_configs.decode_accept_len, cost_model ("timed" or "leviathan") and pass_cost_json (the
  engine iteration at every depth in decode steps, when timed): the choice's inputs, kept with
  the decision so a production re-tune costs passes the way the offline choice did. Offline
  versions stored before get them from their select job's stored choice and, when it was timed,
  their cost job's timed engine iterations.
Columns are nullable: rows written before this revision have none of them. Written out in full
rather than importing db.tables (see 0001).
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

TAG_LEN = 64
_MATCH = (
    "diagnostics.job_id = curves.job_id AND diagnostics.condition = curves.condition AND "
    "diagnostics.temperature = curves.temperature AND diagnostics.depth = curves.depth AND "
    "diagnostics.name = 'decode_accept_len'"
)


def upgrade() -> None:
    with op.batch_alter_table("curves") as batch:
        batch.add_column(sa.Column("decode_accept_len", sa.Float(), nullable=True))
    op.execute(f"UPDATE curves SET decode_accept_len = (SELECT value FROM diagnostics WHERE {_MATCH})")
    op.execute("DELETE FROM diagnostics WHERE name = 'decode_accept_len'")
    _add_drafter_families()
    with op.batch_alter_table("tuned_configs") as batch:
        batch.add_column(sa.Column("decode_accept_len", sa.Float(), nullable=True))
        batch.add_column(sa.Column("cost_model", sa.String(TAG_LEN), nullable=True))
        batch.add_column(sa.Column("pass_cost_json", sa.Text(), nullable=True))
    _add_choice_inputs()


def _add_drafter_families() -> None:
    bind = op.get_bind()
    jobs = sa.table(
        "jobs",
        sa.column("id", sa.Integer),
        sa.column("kind", sa.String),
        sa.column("config_json", sa.Text),
        sa.column("result_json", sa.Text),
    )
    rows = bind.execute(
        sa.select(jobs.c.id, jobs.c.config_json, jobs.c.result_json).where(
            jobs.c.kind == "train_drafter", jobs.c.result_json.is_not(None)
        )
    ).all()
    for job_id, config_json, result_json in rows:
        config, result = json.loads(config_json), json.loads(result_json)
        drafter = config.get("drafter") if isinstance(config, dict) else None
        if not isinstance(result, dict) or "family" in result or not isinstance(drafter, dict):
            continue
        result["family"] = drafter.get("kind", "eagle3")  # the spec's default family
        bind.execute(sa.update(jobs).where(jobs.c.id == job_id).values(result_json=json.dumps(result, sort_keys=True)))


def _add_choice_inputs() -> None:
    bind = op.get_bind()
    jobs = sa.table(
        "jobs", sa.column("id", sa.Integer), sa.column("job_hash", sa.String), sa.column("result_json", sa.Text)
    )
    tuned = sa.table(
        "tuned_configs",
        sa.column("id", sa.Integer),
        sa.column("job_id", sa.Integer),
        sa.column("cost_job_hash", sa.String),
        sa.column("decode_accept_len", sa.Float),
        sa.column("cost_model", sa.String),
        sa.column("pass_cost_json", sa.Text),
    )
    every_job = bind.execute(sa.select(jobs.c.id, jobs.c.job_hash, jobs.c.result_json)).all()
    results = {job_hash: result for _, job_hash, result in every_job}
    ids = {job_id: job_hash for job_id, job_hash, _ in every_job}
    for row_id, job_id, cost_job in bind.execute(
        sa.select(tuned.c.id, tuned.c.job_id, tuned.c.cost_job_hash).where(tuned.c.job_id.is_not(None))
    ).all():
        choice = _json(results.get(ids.get(job_id))).get("choice")
        if not isinstance(choice, dict) or choice.get("cost_model") not in ("timed", "leviathan"):
            continue  # chosen before cost models were recorded: nothing to say
        values = {"cost_model": choice["cost_model"], "decode_accept_len": choice.get("decode_accept_len")}
        pass_ms = (_json(results.get(cost_job)).get("cost") or {}).get("pass_ms") or []
        if choice["cost_model"] == "timed" and len(pass_ms) >= 2 and pass_ms[0] > 0:
            values["pass_cost_json"] = json.dumps([p / pass_ms[0] for p in pass_ms])
        bind.execute(sa.update(tuned).where(tuned.c.id == row_id).values(**values))


def _json(text: str | None) -> dict:
    value = json.loads(text) if text else {}
    return value if isinstance(value, dict) else {}


def downgrade() -> None:
    op.execute(
        "INSERT INTO diagnostics (job_id, target, drafter, condition, temperature, depth, name, value) "
        "SELECT job_id, target, drafter, condition, temperature, depth, 'decode_accept_len', decode_accept_len "
        "FROM curves WHERE decode_accept_len IS NOT NULL"
    )
    with op.batch_alter_table("tuned_configs") as batch:
        batch.drop_column("pass_cost_json")
        batch.drop_column("cost_model")
        batch.drop_column("decode_accept_len")
    with op.batch_alter_table("curves") as batch:
        batch.drop_column("decode_accept_len")
