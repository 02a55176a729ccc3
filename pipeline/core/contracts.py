"""The typed configs and results of every job kind: what a job is given and what it returns.

A config is exactly what determines a job's result, so the job's hash is taken over it (see
`JobConfig.hashed`); a result is what the worker sends back. Both are frozen pydantic models,
so a stored result is read back into its type and nothing has to guess what a dict holds.
Which config and result belong to which kind is declared once, in `pipeline/core/kinds.py`.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import model_validator

from pipeline.core.contract_base import Contract
from pipeline.core.files import Files
from pipeline.core.model_settings import BuiltinTarget, DrafterSpec
from pipeline.core.settings import (
    CostTiming,
    Evaluation,
    PromptsFile,
    Serving,
    TimedPrompts,
    TrainingData,
    Validation,
)
from pipeline.core.tree_contracts import TreeChoice
from pipeline.core.types import CostProfile, Curve, DepthChoice


class JobConfig(Contract):
    """Everything that decides a job's result, and nothing else."""

    seed: int
    # Fields a job's hash leaves out: names that only label results (renaming a drafter must
    # not retrain it). pydantic `exclude` form, e.g. {"drafter": {"name"}}.
    unhashed: ClassVar[dict] = {}

    def hashed(self) -> dict:
        return self.model_dump(mode="json", exclude=self.unhashed or None)


class TargetRef(Contract):
    """The target of a pairing: a built-in one (its checkpoint is the job's "target" input, and every
    source field is None) or a model to load (pipeline/core/sources.py)."""

    name: str
    hf: str | None = None  # a Hugging Face id or local folder
    gguf: str | None = None  # a GGUF file: its name in `hf` or `package`, or its path
    package: str | None = None  # an installed package shipping the GGUF file
    dtype: str = "auto"


class WorkerEnv(Contract):
    """What a worker reports about itself (workers/runtime/environment.py). The timing kinds' configs hold
    the one their placement gets on the cluster, so timings from one GPU generation, CUDA or
    library release are never reused for another; a worker that differs refuses the job."""

    device: str  # the GPU model ("NVIDIA H100 80GB HBM3"), or the CPU model for a CPU job
    cuda: str  # torch's CUDA release, "none" on CPU
    driver: str  # the NVIDIA driver, "none" on CPU
    torch: str
    transformers: str


# -- configs --------------------------------------------------------------------------------------


class TrainTargetConfig(JobConfig):
    builtin: BuiltinTarget
    device: str


class RegenerateConfig(JobConfig):
    """The target answers the training questions itself: its drafters' training text."""

    target: TargetRef
    data: TrainingData
    device: str
    unhashed: ClassVar[dict] = {"target": {"name"}, "data": {"prompts": {"path"}}}


class StatesRule(Contract):
    """Which target states one drafter reads (workers/drafters/target_layers.py)."""

    fusion: str  # "tri" | "last" | "spread<n>"
    capture_layers: tuple[int, ...] | None  # the spec's explicit choice; None: the fusion's default


class TargetFeaturesConfig(JobConfig):
    """The target's hidden states over its regenerated text, at every layer that the rules of its
    drafters read: one pass of the target, shared by all of them. `rules` is sorted and without repeats."""

    target: TargetRef
    rules: tuple[StatesRule, ...]
    device: str
    unhashed: ClassVar[dict] = {"target": {"name"}}


class WorkerGroup(Contract):
    """A training job on a group of Ray Train workers (workers/runtime/ray_train.py): how many, how
    the drafter is spread over them, and what each one is given."""

    workers: int
    sharding: str  # "ddp" | "fsdp"
    num_cpus: float  # each worker's
    num_gpus: float
    accelerator_type: str | None = None


class TrainDrafterConfig(JobConfig):
    target: TargetRef
    drafter: DrafterSpec
    device: str
    group: WorkerGroup | None = None  # None: one process, the job's own
    # how a DFlash drafter is run (block_drafting) and a later stage (distill) do not change this
    # training; a group's worker count and sharding do (workers/runtime/replicas.py), not what each has
    unhashed: ClassVar[dict] = {
        "target": {"name"},
        "drafter": {"name", "block_drafting", "distill"},
        "group": {"num_cpus", "num_gpus", "accelerator_type"},
    }


class DistillDrafterConfig(JobConfig):
    """The stage after a drafter's own training (its spec's `distill`), from its trained checkpoint
    (the train_drafter job's, or the spec's `path`); rollouts draw the target's training questions."""

    target: TargetRef
    drafter: DrafterSpec
    max_prompt_tokens: int  # training_data's: questions longer than this are not rolled out
    prompts: PromptsFile | None = None  # training_data's prompts file, None: the built-in questions
    device: str
    unhashed: ClassVar[dict] = {"target": {"name"}, "drafter": {"name"}, "prompts": {"path"}}

    def hashed(self) -> dict:
        out = super().hashed()
        if self.drafter.distill.method == "imitation":  # it rolls nothing out: the questions change nothing
            del out["max_prompt_tokens"], out["prompts"]
            for key in self.drafter.distill.ROLLOUT_ONLY:
                del out["drafter"]["distill"][key]
        return out


class MeasureCurveConfig(JobConfig):
    target: TargetRef
    drafter: DrafterSpec
    evaluation: Evaluation
    device: str
    unhashed: ClassVar[dict] = {"evaluation": {"prompts": {"path"}}}  # a prompts file counts by its digest


class ProfileCostConfig(JobConfig):
    target: TargetRef
    drafter: DrafterSpec
    cost: CostTiming
    max_depth: int
    prompts: TimedPrompts  # the engine's whole iteration is timed decoding the curve's prompts
    device: str
    num_cpus: float  # timings depend on the threads and devices the job had
    num_gpus: float
    accelerator_type: str | None = None  # and on the GPU model, when the spec names one
    worker: WorkerEnv | None = None  # what the worker placed like this reports (None: not probed)
    unhashed: ClassVar[dict] = {"target": {"name"}, "drafter": {"name"}}


class SelectDepthConfig(JobConfig):
    target: str  # names only: the pairing the decision is stored under
    drafter: str
    cost_ratio: float | None  # the spec's override of the timed engine iterations
    max_batch_size: int
    draft_sampling: Literal["sampled", "greedy"] = "sampled"  # how the curve drew drafts at T > 0
    block_drafting: Literal["trained", "depth"] | None = None  # a DFlash drafter's, as the curve ran it


class MeasureSpeedupConfig(JobConfig):
    target: TargetRef
    drafter: DrafterSpec
    evaluation: Evaluation
    validation: Validation
    device: str
    num_cpus: float  # compared with the costs timed by profile_cost: placed alike
    num_gpus: float
    accelerator_type: str | None = None
    worker: WorkerEnv | None = None  # what the worker placed like this reports (None: not probed)
    unhashed: ClassVar[dict] = {"evaluation": {"prompts": {"path"}}}


class ServeCheckConfig(JobConfig):
    """A pairing served by a real serving engine (pipeline/core/settings.Serving): the engine's
    release is part of the identity, the path of its environment is not."""

    target: TargetRef
    drafter: DrafterSpec
    evaluation: Evaluation
    validation: Validation  # the held-out prompts and how many tokens each decodes
    serving: Serving
    device: str
    num_cpus: float  # the engine is bound to the job's cores on CPU
    num_gpus: float
    accelerator_type: str | None = None
    worker: WorkerEnv | None = None
    unhashed: ClassVar[dict] = {"evaluation": {"prompts": {"path"}}, "serving": {"python"}}


class EngineCostConfig(JobConfig):
    """A pairing's costs timed by the serving engine itself: the held-out prompts of the speedup
    check decoded at every constant depth and profiled batch size (workers/jobs/engine_cost.py),
    once each: of the timing and validation settings only the batch sizes, the prompts and the
    tokens decoded count."""

    target: TargetRef
    drafter: DrafterSpec
    evaluation: Evaluation
    validation: Validation
    cost: CostTiming
    serving: Serving
    device: str
    num_cpus: float
    num_gpus: float
    accelerator_type: str | None = None
    worker: WorkerEnv | None = None
    unhashed: ClassVar[dict] = {
        "target": {"name"},
        "drafter": {"name"},
        "evaluation": {"prompts": {"path"}},
        "validation": {"repeats", "warmup_prompts", "tolerance", "compare_hf"},
        "cost": {"context_len", "warmup", "repeats", "tree_budget"},
        "serving": {"python", "tolerance"},
    }


# -- results --------------------------------------------------------------------------------------


class Stored(Contract):
    """A result made of files. A job stores them in the run's checkpoint store and returns a
    reference (pipeline/core/artifacts.py): `files_uri` (a folder, or a URI every node reads),
    their content hash and sizes; jobs that take the result fetch the files on their node, the
    driver never holds them. `files` holds them as bytes only inside one process: what a job
    function hands its runner, or an input a caller builds in memory."""

    metrics: dict[str, int | float]
    files: Files | None = None
    files_uri: str | None = None
    files_sha256: str | None = None  # files_hash of the files: what the reference must still hold to be reused
    file_sizes: dict[str, int] = {}  # name -> bytes: how a remote store's copy is checked without reading it

    @model_validator(mode="before")
    @classmethod
    def _folder_of_older_releases(cls, data):
        """Results recorded before references held their folder as `checkpoint_dir`: the same thing."""
        if isinstance(data, dict) and "checkpoint_dir" in data:
            data = dict(data)
            folder = data.pop("checkpoint_dir")
            data.setdefault("files_uri", folder)
        return data

    def by_reference(self, uri: str, sha256: str, sizes: dict[str, int]):
        return self.model_copy(update={"files": None, "files_uri": uri, "files_sha256": sha256, "file_sizes": sizes})


class Trained(Stored):
    """A trained model (a Hugging Face folder, or an EAGLE drafter's checkpoint)."""

    family: str | None = None  # the drafter family ("eagle3", "standalone"); None for a target
    history: dict[str, list[tuple[int, float]]] = {}


class Dataset(Stored):
    """Training data a job made: the target's regenerated text (tokens.safetensors), or its hidden
    states over that text (features.safetensors)."""


class DiagnosticValue(Contract):
    """One drift diagnostic of one curve: depth 1..max_depth, or 0 for a value of the whole curve."""

    condition: str
    temperature: float
    depth: int
    name: str
    value: float


class MeasuredCurve(Contract):
    """One (condition, temperature) of a measurement: its curve and the per-prompt data behind it."""

    curve: Curve
    # per prompt, [chains, sum of survival[1..K]]: for bootstrap intervals
    per_prompt: tuple[tuple[int | float, ...], ...]
    # per prompt, [tokens, passes] of a decoder at k = 0..K
    walks: tuple[tuple[tuple[int, int], ...], ...]
    # per prompt, each chain start's rank path (pipeline/core/trees.py); () when the evaluation kept
    # no ranks (tree_topk 0)
    rank_paths: tuple[tuple[tuple[int, ...], ...], ...] = ()


class Measured(Contract):
    """The curves of one pairing: one per (condition, temperature), the spec's first one first."""

    curves: tuple[MeasuredCurve, ...]
    diagnostics: tuple[DiagnosticValue, ...] = ()
    rank_topk: int = 0  # the drafter's top-k the rank paths were kept within (evaluation.tree_topk)
    # each prompt's category, aligned with every curve's per_prompt and walks rows (from a prompts
    # file that has them), () otherwise; per-category curves are pooled from those rows
    categories: tuple[str, ...] = ()

    @property
    def primary(self) -> MeasuredCurve:
        """The curve of the spec's first condition and temperature: the one depths are chosen on."""
        return self.curves[0]

    @model_validator(mode="before")
    @classmethod
    def _from_parallel_tuples(cls, data):
        """Results stored before curves became records held four tuples aligned by position."""
        if isinstance(data, dict) and "per_prompt" in data:
            data = dict(data)
            curves, per_prompt, walks = data.pop("curves"), data.pop("per_prompt"), data.pop("walks")
            paths = data.pop("rank_paths", ()) or [()] * len(curves)
            data["curves"] = [
                {"curve": c, "per_prompt": p, "walks": w, "rank_paths": r}
                for c, p, w, r in zip(curves, per_prompt, walks, paths, strict=True)
            ]
        return data


class Profiled(Contract):
    cost: CostProfile


class CategoryChoice(Contract):
    """The depth chosen for one prompt category of the primary curve (pipeline/core/categories.py)."""

    category: str
    prompts: int
    choice: DepthChoice


class Selected(Contract):
    """The depth chosen for the primary curve, and per batch size when costs were profiled so."""

    choice: DepthChoice
    hardware: str
    condition: str
    temperature: float
    # the cost of a round at every depth the choice used, in decode steps: timed, or Leviathan's with one
    # drafter pass a round for a one-pass drafter; None for Leviathan's k c + 1
    pass_cost: tuple[float, ...] | None = None
    batch_depths: dict[int, int] | None = None
    schedule: tuple[tuple[int, int, int], ...] | None = None  # inclusive [lo, hi, k] ranges
    draft_sampling: Literal["sampled", "greedy"] = "sampled"  # at T > 0, the drafting rule the curve assumed
    # a DFlash drafter's depths below its trained block: drafted from the whole block ("trained") or a
    # block of k + 1 ("depth") in the curve, costs and validation; None for every other drafter
    block_drafting: Literal["trained", "depth"] | None = None
    by_category: tuple[CategoryChoice, ...] = ()  # with a categorised prompts file: the batch-1 depth per category
    tree: TreeChoice | None = None  # with ranks measured and tree passes timed
    timed_by: str = "specfleet"  # whose clock timed the costs the choice used (CostProfile.timed_by)

    @property
    def schedule_measured_to(self) -> int | None:
        """The largest batch size whose depth was measured: the schedule's ranges above it carry
        that depth unmeasured (extrapolated). None without a schedule."""
        return max(self.batch_depths) if self.schedule is not None and self.batch_depths else None


class HFRun(Contract):
    """Hugging Face `generate` on the same prompts: plain, or assisted by the standalone draft model
    with `num_assistant_tokens` drafts a round (workers/decoding/hf_generate.py)."""

    name: str
    num_assistant_tokens: int | None
    confidence_threshold: float | None  # an assisted draft stops early under this top probability
    tokens_per_s: float
    speedup: float  # over plain HF generate
    mismatches: int  # greedy: prompts decoded differently from plain HF generate


class TreeCheck(Contract):
    """The engine with the chosen tree and its neighbours by size, beside the chain at its chosen depth
    and plain decoding, all timed in one loop (workers/measure/tree_speedup.py)."""

    trees: tuple[tuple[tuple[int, ...], ...], ...]  # [0]: the chosen tree, then its neighbours by size
    tokens_per_s: tuple[float, ...]  # aligned with trees
    engine_accept_len: tuple[float, ...]  # tokens per target pass the engine emitted
    decode_accept_len: tuple[float, ...]
    predicted_speedup: tuple[float, ...]  # over plain decoding, batch size 1
    measured_speedup: tuple[float, ...]  # over plain decoding timed in the same loop
    plain_tokens_per_s: float
    chain_depth: int
    chain_tokens_per_s: float
    chain_predicted_speedup: float
    greedy_mismatches: int  # prompts a tree or the chain decoded differently from plain greedy decoding

    @property
    def over_chain(self) -> float:
        """The chosen tree's measured tokens/s over the chain's."""
        return self.tokens_per_s[0] / self.chain_tokens_per_s


class SpeedupCheck(Contract):
    """The real engine at every depth k = 0..max_depth beside the predicted speedup, and a verdict."""

    condition: str
    temperature: float
    tokens_per_s: tuple[float, ...]
    measured_speedup: tuple[float, ...]
    engine_accept_len: tuple[float, ...]  # tokens per target pass the engine emitted
    greedy_mismatches: int
    tokens: tuple[int, ...]
    seconds: tuple[float, ...]
    predicted_speedup: tuple[float, ...]
    chosen_depth: int
    best_measured_depth: int
    chosen_vs_best: float
    tolerance: float
    hardware: str
    cost_hardware: str
    passed: bool
    problems: tuple[str, ...]
    hf_runs: tuple[HFRun, ...] = ()  # with validation.compare_hf: the same prompts through HF generate
    tree: TreeCheck | None = None  # when a tree was chosen


class Validated(Contract):
    speedup_check: SpeedupCheck


class ServedPoint(Contract):
    """The serving engine at one depth setting and one batch size (workers/jobs/serve_check.py)."""

    depth: int  # the depth the config asks for at this batch size (0: no speculation)
    batch_size: int
    tokens_per_s: float
    measured_speedup: float  # over the engine without speculation at this batch size
    predicted_speedup: float  # specfleet's model at this depth and batch size
    accept_len: float  # the engine's mean accepted length, 1 + accepted / drafts (1 without speculation)
    curve_accept_len: float  # specfleet's measurement at this depth (a decoder's tokens per pass where measured)
    accepted_per_pos: tuple[float, ...]  # the share of drafts whose i-th token was accepted
    depth_run: float  # draft tokens per draft: the depth the engine actually ran (0 without speculation)
    greedy_equal: bool  # every output identical to the engine's own without speculation
    seconds: float
    tokens: int
    # seconds per group of batch_size prompts (the same groups at every depth), one row per repeat
    # within the engine start: the verdict resamples them for its interval (empty: not recorded)
    group_seconds: tuple[tuple[float, ...], ...] = ()


class ServingCheck(Contract):
    """A depth choice served by a real engine with exactly the config `specfleet autotune` prints,
    beside a constant-depth sweep k = 0..max_depth at every profiled batch size, and a verdict
    (pipeline/core/serving_verdict.py)."""

    engine: str  # "vllm 0.32.0"
    speculative_config: str  # what autotune prints for the choice ("" when the choice is no speculation)
    condition: str
    temperature: float
    hardware: str  # where the engine ran
    cost_hardware: str  # where the costs the choice used were timed
    sweep: tuple[ServedPoint, ...]  # every depth k at every batch size, k-major
    chosen: tuple[ServedPoint, ...]  # the printed config at every batch size
    best_depth: dict[int, int]  # batch size -> the engine's fastest depth of the sweep
    # batch size -> the printed config's tokens/s over the fastest depth's; where the printed config
    # ran one depth of the sweep, its two engine starts pooled
    chosen_vs_best: dict[int, float]
    # batch size -> the central 90% interval of chosen_vs_best over the repeats and prompt groups
    chosen_vs_best_interval: dict[int, tuple[float, float]] = {}
    tolerance: float
    passed: bool
    problems: tuple[str, ...]
    notes: tuple[str, ...] = ()  # what the emitter noted, and how the engine's acceptance compares


class Served(Contract):
    serving_check: ServingCheck | None  # None: the engine cannot load this drafter (`refused` says why)
    refused: str | None = None
