"""ORM tables of the tuned-config database.

Column names follow the metric names used everywhere else (``depth``, ``cond_accept``,
``survival``, ``accept_len``, ``cost_ratio``, ``tokens_per_s``). Rows never leave the
``db`` package: the store turns them into plain dicts. ``migrations/versions`` must create
exactly these tables; ``tests/db/test_store.py`` checks that the two agree.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from pipeline.core.labels import LABEL_MAX

JOB_STATUSES = ("pending", "running", "done", "failed")
# Where a tuned-config version came from: an offline select job, or production measurements.
TUNED_SOURCES = ("offline", "production")
# How a depth choice costed a target pass: timed engine iterations, or Leviathan's k c + 1.
COST_MODELS = ("timed", "leviathan")
# At temperature > 0, how drafts were drawn and verified (workers/decoding/sampling.py).
DRAFT_SAMPLING = ("sampled", "greedy")
# How a DFlash drafter's depths below its trained block were drafted (the drafter spec's block_drafting).
BLOCK_DRAFTING = ("trained", "depth")

NAME_LEN = LABEL_MAX  # model ids and local paths, experiment and job names, hardware descriptions
HASH_LEN = 64  # sha256 hex digests
TAG_LEN = 64  # job kinds, statuses, conditions, diagnostic names, MLflow run ids, code versions

# Named constraints, so the migration can name them identically and later migrations can
# drop or alter them by name on both backends.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utc_now() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend.

    PostgreSQL stores ``timestamptz``; SQLite keeps no offset, so values are written as UTC and
    the offset is attached again on read. Naive datetimes are refused rather than guessed at.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: pass a timezone-aware datetime")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Experiment(Base):
    """One experiment spec, identified by its name and the hash of its content."""

    __tablename__ = "experiments"
    __table_args__ = (UniqueConstraint("name", "spec_hash"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_LEN))
    spec_hash: Mapped[str] = mapped_column(String(HASH_LEN))
    spec_yaml: Mapped[str] = mapped_column(Text)
    code_version: Mapped[str] = mapped_column(String(TAG_LEN))
    mlflow_run_id: Mapped[str | None] = mapped_column(String(TAG_LEN))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utc_now)


class JobRecord(Base):
    """One unit of work keyed by the content hash of its config; shared by experiments."""

    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint("status IN (" + ", ".join(f"'{s}'" for s in JOB_STATUSES) + ")", name="status"),
        CheckConstraint("attempts >= 0", name="attempts"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_hash: Mapped[str] = mapped_column(String(HASH_LEN), unique=True)
    kind: Mapped[str] = mapped_column(String(TAG_LEN))
    name: Mapped[str] = mapped_column(String(NAME_LEN))
    status: Mapped[str] = mapped_column(String(TAG_LEN))
    attempts: Mapped[int] = mapped_column(Integer)
    config_json: Mapped[str] = mapped_column(Text)
    result_json: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    mlflow_run_id: Mapped[str | None] = mapped_column(String(TAG_LEN))
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    duration_s: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utc_now)
    # the driver that claimed it last (db/owners.py), and until when its claim holds unless renewed
    owner: Mapped[str | None] = mapped_column(String(NAME_LEN))
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime())


class ExperimentJob(Base):
    """Which experiments use which jobs: a finished job is reused by later experiments."""

    __tablename__ = "experiment_jobs"
    __table_args__ = (Index(None, "job_id"),)

    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id"), primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), primary_key=True)


class MeasuredAt:
    """The columns that place a measured value: its job, pairing, condition, temperature, depth."""

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"))
    target: Mapped[str] = mapped_column(String(NAME_LEN))
    drafter: Mapped[str] = mapped_column(String(NAME_LEN))
    condition: Mapped[str] = mapped_column(String(TAG_LEN))
    temperature: Mapped[float] = mapped_column(Float)
    depth: Mapped[int] = mapped_column(Integer)


class CurvePoint(MeasuredAt, Base):
    """Acceptance at one depth (1..max_depth) of one measured curve.

    Depth 0 is not stored: it has no cond_accept or survival, and its accept_len is always 1.
    """

    __tablename__ = "curves"
    __table_args__ = (
        UniqueConstraint("job_id", "condition", "temperature", "category", "depth"),
        CheckConstraint("depth >= 1", name="depth"),
        Index(None, "target", "drafter"),
    )

    cond_accept: Mapped[float] = mapped_column(Float)
    survival: Mapped[float] = mapped_column(Float)
    accept_len: Mapped[float] = mapped_column(Float)
    # a decoder's tokens per target pass at this depth (what the depth choice maximises);
    # None for curves measured before it was
    decode_accept_len: Mapped[float | None] = mapped_column(Float)
    # the prompts' category, from a prompts file that labels them; "" for every prompt together
    category: Mapped[str] = mapped_column(String(NAME_LEN), default="", server_default="")


class Diagnostic(MeasuredAt, Base):
    """One named drift diagnostic measured beside a curve, long format: one row per (depth, name).

    Per-depth values (``rms``, ``sink_attn``, ``recent_attn``, ``attn_entropy``) use depth
    1..max_depth; values that belong to the whole curve and have no depth use depth 0.
    """

    __tablename__ = "diagnostics"
    __table_args__ = (
        UniqueConstraint("job_id", "condition", "temperature", "depth", "name"),
        CheckConstraint("depth >= 0", name="depth"),
        Index(None, "target", "drafter"),
    )

    name: Mapped[str] = mapped_column(String(TAG_LEN))
    value: Mapped[float] = mapped_column(Float)


class SpeedupPoint(MeasuredAt, Base):
    """One row per depth of one engine benchmark: the real engine at depth k versus the model.

    Depth 0 is plain decoding, the baseline: measured_speedup 1 and engine_accept_len 1. Depths
    1..max_depth speculate; ``measured_speedup`` is tokens_per_s over depth 0's (at the same batch
    size), and ``predicted_speedup`` is the cost model's value for the same depth and batch size.
    A serving engine's check (serve_check) adds rows per batch size, swept and as printed.
    """

    __tablename__ = "speedup_checks"
    __table_args__ = (
        # named: the convention's name (every column) passes PostgreSQL's 63 characters
        UniqueConstraint(
            "job_id", "condition", "temperature", "run", "batch_size", "depth", name="uq_speedup_checks_point"
        ),
        CheckConstraint("depth >= 0", name="depth"),
        CheckConstraint("tokens_per_s > 0", name="tokens_per_s"),
        CheckConstraint("batch_size >= 1", name="batch_size"),
        Index(None, "target", "drafter"),
    )

    hardware: Mapped[str] = mapped_column(String(NAME_LEN))
    # "specfleet" (its own engine, measure_speedup) or a serving engine and release ("vllm 0.32.0")
    engine: Mapped[str] = mapped_column(String(NAME_LEN), server_default="specfleet")
    batch_size: Mapped[int] = mapped_column(Integer, server_default="1")
    # "sweep": a constant depth of the sweep; "printed": the config autotune prints (depth per batch size)
    run: Mapped[str] = mapped_column(String(TAG_LEN), server_default="sweep")
    depth_run: Mapped[float | None] = mapped_column(Float)  # draft tokens per draft, where the engine counts them
    tokens_per_s: Mapped[float] = mapped_column(Float)
    measured_speedup: Mapped[float] = mapped_column(Float)
    predicted_speedup: Mapped[float] = mapped_column(Float)
    engine_accept_len: Mapped[float] = mapped_column(Float)  # tokens per target pass the engine emitted


class RankAccept(MeasuredAt, Base):
    """Acceptance by rank and depth beside a curve, what a draft tree needs: at depth d (1..max_depth)
    and rank r, the share of chain starts whose target token was the drafter's rank-r proposal at
    step d, among those whose token was within the drafter's top-k at every step before d."""

    __tablename__ = "rank_accepts"
    __table_args__ = (
        UniqueConstraint("job_id", "condition", "temperature", "depth", "rank"),
        CheckConstraint("depth >= 1", name="depth"),
        CheckConstraint("rank >= 0", name="rank"),
        CheckConstraint("accept >= 0 AND accept <= 1", name="accept"),
        Index(None, "target", "drafter"),
    )

    rank: Mapped[int] = mapped_column(Integer)
    accept: Mapped[float] = mapped_column(Float)


class TreeCheckPoint(MeasuredAt, Base):
    """One draft tree the engine ran in a speedup check (position 0: the chosen tree, then trees of
    neighbouring sizes), beside the chain at its chosen depth and plain decoding timed in the same
    loop. ``depth`` is the tree's depth; ``tree_json`` its nodes as JSON [[ranks...], ...]."""

    __tablename__ = "tree_checks"
    __table_args__ = (
        UniqueConstraint("job_id", "position"),
        CheckConstraint("depth >= 1", name="depth"),
        CheckConstraint("position >= 0", name="position"),
        CheckConstraint("tokens_per_s > 0 AND chain_tokens_per_s > 0", name="tokens_per_s"),
        Index(None, "target", "drafter"),
    )

    hardware: Mapped[str] = mapped_column(String(NAME_LEN))
    position: Mapped[int] = mapped_column(Integer)
    tree_json: Mapped[str] = mapped_column(Text)
    tokens_per_s: Mapped[float] = mapped_column(Float)
    engine_accept_len: Mapped[float] = mapped_column(Float)
    decode_accept_len: Mapped[float] = mapped_column(Float)
    predicted_speedup: Mapped[float] = mapped_column(Float)
    measured_speedup: Mapped[float] = mapped_column(Float)
    chain_depth: Mapped[int] = mapped_column(Integer)
    chain_tokens_per_s: Mapped[float] = mapped_column(Float)


class CategoryDepth(MeasuredAt, Base):
    """The depth a select job chose for one prompt category of its primary curve, at batch size 1,
    costed as the pairing's own choice (the tuned config the same job wrote)."""

    __tablename__ = "category_depths"
    __table_args__ = (
        UniqueConstraint("job_id", "category"),
        CheckConstraint("depth >= 0", name="depth"),
        CheckConstraint("prompts >= 1", name="prompts"),
        Index(None, "target", "drafter"),
    )

    category: Mapped[str] = mapped_column(String(NAME_LEN))
    prompts: Mapped[int] = mapped_column(Integer)
    accept_len: Mapped[float] = mapped_column(Float)
    decode_accept_len: Mapped[float | None] = mapped_column(Float)
    speedup: Mapped[float] = mapped_column(Float)


class TunedConfig(Base):
    """One immutable version of the tuned config of one workload, with what reproduces it.

    A workload is (target, drafter, hardware, condition). Every decision adds a version
    (1, 2, ...); exactly one version per workload is active, the others are its history.
    Offline versions come from a select job (``job_id``, ``experiment_id``, ``spec_hash``);
    production versions have none of those.
    """

    __tablename__ = "tuned_configs"
    __table_args__ = (
        CheckConstraint("depth >= 0", name="depth"),
        CheckConstraint("version >= 1", name="version"),
        CheckConstraint("source IN (" + ", ".join(f"'{s}'" for s in TUNED_SOURCES) + ")", name="source"),
        CheckConstraint("source = 'production' OR job_id IS NOT NULL", name="offline_job"),
        UniqueConstraint("target", "drafter", "hardware", "condition", "version"),
        Index(None, "target", "drafter", "hardware"),
        # At most one active version per workload, enforced by the database on both backends.
        Index(
            "uq_tuned_configs_active_workload",
            "target",
            "drafter",
            "hardware",
            "condition",
            unique=True,
            postgresql_where=text("active"),
            sqlite_where=text("active"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id"), unique=True)
    experiment_id: Mapped[int | None] = mapped_column(ForeignKey("experiments.id"))
    target: Mapped[str] = mapped_column(String(NAME_LEN))
    drafter: Mapped[str] = mapped_column(String(NAME_LEN))
    hardware: Mapped[str] = mapped_column(String(NAME_LEN))
    condition: Mapped[str] = mapped_column(String(TAG_LEN))
    temperature: Mapped[float] = mapped_column(Float)
    depth: Mapped[int] = mapped_column(Integer)
    accept_len: Mapped[float] = mapped_column(Float)
    speedup: Mapped[float] = mapped_column(Float)
    cost_ratio: Mapped[float] = mapped_column(Float)
    spec_hash: Mapped[str | None] = mapped_column(String(HASH_LEN))
    code_version: Mapped[str] = mapped_column(String(TAG_LEN))
    mlflow_run_id: Mapped[str | None] = mapped_column(String(TAG_LEN))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utc_now)
    version: Mapped[int] = mapped_column(Integer)
    active: Mapped[bool] = mapped_column(Boolean)
    source: Mapped[str] = mapped_column(String(TAG_LEN))
    # The per-batch-size depths as JSON [[lo, hi, k], ...], inclusive ranges; None: one depth.
    schedule_json: Mapped[str | None] = mapped_column(Text)
    # the largest batch size whose depth was measured: ranges above it are extrapolated; None: not
    # recorded (no schedule, older rows)
    schedule_measured_to: Mapped[int | None] = mapped_column(Integer)
    curve_job_hash: Mapped[str | None] = mapped_column(String(HASH_LEN))
    cost_job_hash: Mapped[str | None] = mapped_column(String(HASH_LEN))
    drafter_job_hash: Mapped[str | None] = mapped_column(String(HASH_LEN))
    notes: Mapped[str | None] = mapped_column(Text)
    # what the choice maximised and how it costed a pass: a decoder's tokens per target pass at
    # `depth`, "timed" (engine iterations) or "leviathan" (k c + 1), and the timed cost of a pass
    # at every k in decode steps as JSON [1.0, ...]
    decode_accept_len: Mapped[float | None] = mapped_column(Float)
    cost_model: Mapped[str | None] = mapped_column(String(TAG_LEN))
    pass_cost_json: Mapped[str | None] = mapped_column(Text)
    # at temperature > 0, how the curve's drafts were drawn and verified: "sampled" (from q) or
    # "greedy" (argmax, q one-hot); None: not recorded (production versions, older rows)
    draft_sampling: Mapped[str | None] = mapped_column(String(TAG_LEN))
    # whose clock timed the costs the choice used: "specfleet" (its own engine) or a serving engine
    # and its release ("vllm 0.32.0"); None: not recorded (production versions, older rows)
    timed_by: Mapped[str | None] = mapped_column(String(TAG_LEN))
    # a DFlash drafter's: "trained" (depth k verified the first k drafts of the whole trained block) or
    # "depth" (a block of k + 1); None for other drafters, production versions and older rows
    block_drafting: Mapped[str | None] = mapped_column(String(TAG_LEN))
    # the draft tree chosen at batch size 1, as JSON [[ranks...], ...] (pipeline/core/trees.py), a
    # decoder's tokens per target pass with it, its predicted speedup, and the predicted speedup of the
    # chain at `depth` under the same tree cost model; None: no tree was chosen
    tree_json: Mapped[str | None] = mapped_column(Text)
    tree_decode_accept_len: Mapped[float | None] = mapped_column(Float)
    tree_speedup: Mapped[float | None] = mapped_column(Float)
    tree_chain_speedup: Mapped[float | None] = mapped_column(Float)
    # whether that tree was chosen at every profiled batch size (an engine runs one tree at all of them)
    tree_all_batches: Mapped[bool | None] = mapped_column(Boolean)
    # a production version's inputs as one sha256 digest (the metrics' counters, the pairing, hardware,
    # condition, temperature, cost ratio and what the choice read from the database, the code
    # version): a re-tune from the same inputs reuses the active version instead of adding one.
    # None: offline versions, and production versions stored before revision 0013
    inputs_sha256: Mapped[str | None] = mapped_column(String(HASH_LEN))
