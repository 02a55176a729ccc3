"""The sections of an experiment spec, as frozen pydantic models: training data, pairings,
evaluation, cost, validation, resources, and the limits and base class every section shares (its
targets and drafters are in pipeline/core/model_settings.py).

They are both what the YAML spec validates into (pipeline/spec.py adds the whole spec, the
checks across sections and the error report) and the typed pieces of job configs
(pipeline/core/contracts.py), so a worker reads `evaluation.max_depth`, never a dict key.
Unknown keys are refused everywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from pipeline.core.conversations import PromptsError, file_digest, read_conversations
from pipeline.core.engine_names import canonical_engine

Corpus = Literal["stdlib", "pydoc", "chat"]
# what a drafter trains on: a built-in corpus, or `regenerated`: its target's own answers (TrainingData)
DrafterCorpus = Literal["stdlib", "pydoc", "chat", "regenerated"]
PROMPT_CONDITIONS = ("default", "template+bos", "template_no_bos", "no_template", "no_template_no_bos", "long_context")
CHAT_ONLY = ("template+bos", "template_no_bos", "no_template", "no_template_no_bos")


# Upper bounds: far beyond any real run, low enough that a typo (10**9 steps) is refused at once.
MAX_STEPS = 10_000_000
MAX_WIDTH = 65_536  # hidden and intermediate sizes, heads
MAX_LAYERS = 1024
MAX_TOKENS = 1_048_576  # one sequence: prompt, window or continuation lengths
MAX_BATCH = 1_048_576
MAX_PROMPTS = 1_000_000
MAX_NAME = 100
MAX_PATH = 4096  # a model id, folder or file: the longest path Linux accepts
NAME = Field(min_length=1, max_length=MAX_NAME, pattern=r"^[A-Za-z0-9_.\-]+$")


def Count(default, *, ge: int = 1, le: int, **kw):  # noqa: N802 (reads as a type in a field)
    """An integer field: a YAML integer only (not true, 1.5 or "3"), within [ge, le]."""
    return Field(default, ge=ge, le=le, strict=True, **kw)


class Strict(BaseModel):
    # finite floats only: an infinite learning rate or cost ratio is a typo, not a setting
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class PromptsFile(Strict):
    """A user's prompts file (JSONL, JSON or Parquet in ShareGPT, OpenAI or plain-prompt shape;
    pipeline/core/conversations.py). Given as its path, or as {path, category}.

    The file is read and checked when the spec is; `path` becomes absolute and `digest` (its
    sha256) is filled in, so a job's hash follows the file's content, not its name, and a worker
    that reads a different file under that path stops with an error. Every worker node must see
    the file at that path (a shared filesystem), as with a model folder given by path."""

    path: str = Field(min_length=1, max_length=MAX_PATH)
    category: str | None = Field(
        "category",
        min_length=1,
        max_length=MAX_NAME,
        description="the record field naming its category (code, math, chat ...); null: none",
    )
    digest: str | None = Field(None, description="sha256 of the file, filled in when the spec is read")
    conversations: int | None = Field(None, description="records in the file, filled in when the spec is read")
    categories: tuple[str, ...] | None = Field(None, description="the categories found, filled in when read")
    filled_in: ClassVar[tuple[str, ...]] = ("digest", "conversations", "categories")  # never written in a spec

    @model_validator(mode="before")
    @classmethod
    def _read(cls, value):
        if isinstance(value, str):
            value = {"path": value}
        if not isinstance(value, dict) or value.get("digest") is not None or not isinstance(value.get("path"), str):
            return value  # already read (a stored job config), or malformed: the field checks say why
        path = Path(value["path"]).expanduser().resolve()
        try:
            found = read_conversations(path, value.get("category", "category"))
        except PromptsError as exc:
            raise ValueError(str(exc)) from None
        cats = sorted({c.category for c in found if c.category is not None})
        return {
            **value,
            "path": str(path),
            "digest": file_digest(path),
            "conversations": len(found),
            "categories": tuple(cats) if cats else None,
        }


class TrainingData(Strict):
    """What a target's drafters train on (a drafter's `train.corpus: regenerated`): the target's own
    answers, as EAGLE-3 and SpecForge train on the target's regenerated responses. The questions are
    the built-in chat corpus's (train split), or a prompts file's conversations up to their last user
    turn; with `answers: as_written` a prompts file's assistant turns are taken as the target's
    answers as they are (data this target already regenerated elsewhere) and nothing is generated.
    One set per target, shared by all its drafters."""

    tokens: int = Count(
        100_000, ge=256, le=10**10, description="tokens to generate per target, prompts and answers together"
    )
    max_new_tokens: int = Count(256, le=MAX_TOKENS, description="longest answer, in tokens")
    max_prompt_tokens: int = Count(256, ge=8, le=MAX_TOKENS, description="prompts longer than this are skipped")
    batch_size: int = Count(16, le=MAX_BATCH, description="prompts answered together")
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="0: greedy answers")
    prompts: PromptsFile | None = Field(None, description="the questions from a prompts file, not the built-in corpus")
    answers: Literal["regenerate", "as_written"] = Field(
        "regenerate",
        description="regenerate: the target answers each question; as_written: the file's assistant "
        "turns are the target's answers (conversations longer than max_prompt_tokens + "
        "max_new_tokens are skipped)",
    )

    @model_validator(mode="after")
    def _answers_need_a_file(self):
        if self.answers == "as_written" and self.prompts is None:
            raise ValueError("answers: as_written takes the assistant turns of a prompts file; give prompts")
        return self


class Pairing(Strict):
    target: str = Field(max_length=MAX_NAME)
    drafter: str = Field(max_length=MAX_NAME)


def _condition_name(value):
    """'long_context' stays; {noise: hidden, a: 0.5} becomes 'hidden_noise@0.5'."""
    if isinstance(value, dict):
        extra = set(value) - {"noise", "a"}
        if extra or value.get("noise") not in ("hidden", "embedding"):
            raise ValueError("a noise condition is {noise: hidden|embedding, a: <level>}")
        level = value.get("a", 0.0)
        if isinstance(level, bool) or not isinstance(level, (int, float)):
            raise ValueError(f"noise level a must be a number, got {level!r}")
        level = float(level)
        if not 0 <= level <= 10:  # NaN fails this too
            raise ValueError(f"noise level a must lie in 0..10, got {level}")
        return f"{value['noise']}_noise@{level:g}"
    if value not in PROMPT_CONDITIONS:
        raise ValueError(
            f"unknown condition {value!r}; use one of {', '.join(PROMPT_CONDITIONS)} "
            "or {noise: hidden|embedding, a: <level>}"
        )
    return value


Condition = Annotated[str | dict, AfterValidator(_condition_name)]


class Evaluation(Strict):
    max_depth: int = Count(6, le=32)
    temperatures: list[Annotated[float, Field(ge=0.0, le=2.0)]] = Field([0.0], min_length=1, max_length=16)
    num_prompts: int = Count(32, le=MAX_PROMPTS)
    prompt_len: int = Count(
        48,
        ge=8,
        le=MAX_TOKENS,
        description="prompt tokens (held-out text, or a chat turn up to the answer); "
        "a prompts file's longer conversations lose their earliest turns, "
        "then the end of their last user turn",
    )
    continuation_len: int = Count(32, le=MAX_TOKENS, description="target-generated tokens; one chain starts at each")
    corpus: Corpus = "stdlib"
    conditions: list[Condition] = Field(["default"], min_length=1, max_length=64)
    diagnostic_prompts: int | None = Field(
        None,
        ge=1,
        le=MAX_PROMPTS,
        description="prompts under each condition after the first: the first of its num_prompts "
        "(None: all of them); the depth is chosen and predicted on the first condition, so it can "
        "take more prompts than the diagnostic ones",
    )
    long_context_len: int = Count(
        512, ge=16, le=MAX_TOKENS, description="prompt tokens under the long_context condition"
    )
    answer_prefix: int = Count(
        4,
        ge=0,
        le=MAX_TOKENS,
        description="chat prompts end this many tokens into the reference answer; "
        "0: where the assistant's turn begins, as a served chat does",
    )
    draft_sampling: Literal["sampled", "greedy"] = Field(
        "sampled",
        description="at temperature > 0: drafts drawn from the drafter's q and kept with min(1, p/q), or "
        "the drafter's argmax verified with q one-hot (vLLM's default draft_sample_method)",
    )
    tree_topk: int = Count(
        4,
        ge=0,
        le=16,
        description="for draft trees: the drafter's top-k kept at every step when "
        "ranking the target's own token (0: chains only)",
    )
    prompts: PromptsFile | None = Field(
        None,
        description="the user's prompts file instead of the built-in corpus: each conversation up to its last "
        "user turn, rendered with the target's chat template; categories give curves per category",
    )

    @model_validator(mode="after")
    def _chat_conditions(self):
        if self.prompts is not None and "corpus" in self.model_fields_set:
            raise ValueError("give corpus (a built-in corpus) or prompts (a file), not both")
        for c in self.conditions:
            if c in CHAT_ONLY and self.corpus != "chat" and self.prompts is None:
                raise ValueError(f"condition '{c}' changes a chat template: it needs corpus: chat or a prompts file")
        if (
            self.prompts is not None
            and self.prompts.conversations is not None
            and self.prompts.conversations < self.num_prompts
        ):
            raise ValueError(
                f"prompts: {self.prompts.path} holds {self.prompts.conversations} conversation(s), "
                f"fewer than num_prompts {self.num_prompts}"
            )
        if len(set(self.conditions)) != len(self.conditions):
            raise ValueError("conditions: each condition once")
        if self.diagnostic_prompts is not None and self.diagnostic_prompts > self.num_prompts:
            raise ValueError(
                f"diagnostic_prompts: {self.diagnostic_prompts} is more than num_prompts {self.num_prompts}; "
                "the diagnostic conditions run the first of the first condition's prompts"
            )
        if len(set(self.temperatures)) != len(self.temperatures):
            raise ValueError(f"temperatures: each temperature once, got {self.temperatures}")
        return self

    def prompts_under(self, condition_index: int) -> int:
        """How many prompts condition `condition_index` (its place in `conditions`) runs."""
        if condition_index == 0 or self.diagnostic_prompts is None:
            return self.num_prompts
        return self.diagnostic_prompts


class CostTiming(Strict):
    """How cost profiling times: what a profile_cost job's result depends on."""

    context_len: int = Count(128, le=MAX_TOKENS, description="cached context length the steps are timed at")
    warmup: int = Count(5, ge=0, le=100_000)
    repeats: int = Count(30, le=100_000)
    batch_sizes: list[Annotated[int, Field(ge=1, le=MAX_BATCH, strict=True)]] = Field(
        [1], max_length=64, description="batch sizes to profile; the first is 1"
    )
    tree_budget: int = Count(
        8,
        ge=0,
        le=64,
        description="the most draft tokens a tree may hold: target passes over up to "
        "tree_budget + 1 tokens and drafter passes over up to tree_budget "
        "nodes are timed (0: chains only)",
    )


class Cost(CostTiming):
    """The spec's `cost` section: the timing, and how the depth choice uses it."""

    cost_ratio: float | None = Field(None, gt=0, le=1000, description="override the measured draft/decode ratio")
    max_batch_size: int | None = Count(
        None,
        le=MAX_BATCH,
        description="the per-batch-size schedule covers 1..max_batch_size; default the largest batch size "
        "profiled. Sizes past the largest profiled keep its depth, and the tuned config records them as "
        "extrapolated",
    )
    timed_by: Literal["specfleet", "vllm"] = Field(
        "specfleet",
        description="whose clock the depth choice uses: specfleet's engine (profile_cost), or the serving "
        "engine of the `serving:` section (engine_cost: its iterations timed at every depth and batch size)",
    )

    @model_validator(mode="after")
    def _batches(self):
        if self.batch_sizes[:1] != [1] or self.batch_sizes != sorted(set(self.batch_sizes)):
            raise ValueError(f"batch_sizes must increase and start at 1, got {self.batch_sizes}")
        if self.max_batch_size is not None and self.max_batch_size < self.batch_sizes[-1]:
            raise ValueError(f"max_batch_size {self.max_batch_size} is below the largest batch size profiled")
        return self

    @property
    def schedule_end(self) -> int:
        """The largest batch size the schedule covers: max_batch_size, else the largest profiled."""
        return self.max_batch_size or self.batch_sizes[-1]


class TimedPrompts(Strict):
    """The prompts a profile_cost job times the engine's whole iteration on: the curve's own, of its
    primary condition, each decoded as deep as the curve measured (what of the evaluation the cost
    table depends on; another temperature or condition list re-times nothing)."""

    corpus: Corpus
    condition: str
    num_prompts: int
    prompt_len: int
    long_context_len: int
    answer_prefix: int
    prompts: PromptsFile | None
    new_tokens: int

    @classmethod
    def of(cls, evaluation: Evaluation) -> TimedPrompts:
        return cls(
            corpus=evaluation.corpus,
            condition=evaluation.conditions[0],
            num_prompts=evaluation.num_prompts,
            prompt_len=evaluation.prompt_len,
            long_context_len=evaluation.long_context_len,
            answer_prefix=evaluation.answer_prefix,
            prompts=evaluation.prompts,
            new_tokens=evaluation.continuation_len,
        )


class Validation(Strict):
    """Run the real speculative engine at every depth and compare with the predicted speedup."""

    num_prompts: int = Count(8, le=MAX_PROMPTS, description="prompts decoded at every depth k = 0..max_depth")
    prompts: Literal["heldout", "curve"] = Field(
        "heldout",
        description="heldout: prompts the curve never saw (how the choice carries to new prompts); "
        "curve: the first of the curve's own primary prompts, so the check holds the speedup model "
        "to the engine on the text it was measured on (the prompt sample's spread drops out)",
    )
    new_tokens: int | None = Count(
        None,
        ge=2,
        le=MAX_TOKENS,
        description="tokens decoded per prompt and depth (default: "
        "evaluation.continuation_len, as far as chains were measured)",
    )
    repeats: int = Count(1, le=1000, description="passes over the prompts")
    warmup_prompts: int = Count(1, ge=0, le=MAX_PROMPTS, description="prompts decoded untimed first, at every depth")
    tolerance: float = Field(
        0.05, ge=0, lt=1, description="the chosen depth must reach (1 - tolerance) x the best measured tokens/s"
    )
    compare_hf: bool = Field(
        False,
        description="also time Hugging Face generate on the same prompts (and, for "
        "a standalone drafter, HF assisted generation at every depth "
        "and with HF's defaults)",
    )


class Serving(Strict):
    """A serving engine in the loop (the `serve_check` job kind): the engine itself, in its own
    environment, serves each pairing with exactly the speculative config `specfleet autotune`
    prints for it, at every depth of the sweep and every profiled batch size, and its own clock
    and spec-decode counters judge the choice.

    The engine is named by the Python executable of its environment (vLLM pins its own torch and
    transformers, so it lives apart, as in production): `make vllm` builds `.venv-vllm`; on a GPU
    cluster every worker node needs that environment at the same path. `python` is made absolute
    and the engine's release is read from it when the spec is read: the release is part of every
    check's identity (a new release re-runs the checks), the path is not."""

    engine: Literal["vllm"] = "vllm"
    python: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_PATH,
        description="the engine environment's Python (default: $SPECFLEET_VLLM_PYTHON, else .venv-vllm/bin/python)",
    )
    version: str | None = Field(None, max_length=MAX_NAME, description="the engine's release, filled in when read")
    kv_cache_gib: float = Field(2.0, gt=0, le=4096, description="KV cache per engine on CPU (VLLM_CPU_KVCACHE_SPACE)")
    tolerance: float = Field(
        0.05, ge=0, lt=1, description="the printed config must reach (1 - tolerance) x the engine's fastest depth"
    )
    repeats: int = Field(
        3,
        ge=1,
        le=100,
        description="times every prompt is decoded at each batch size within one engine start (the "
        "spread of the repeats gives the verdict its interval)",
    )
    start_timeout_s: float = Field(
        900, gt=0, le=86400, description="longest one engine may take to start and serve every batch size"
    )
    filled_in: ClassVar[tuple[str, ...]] = ("version",)

    @field_validator("engine", mode="before")
    @classmethod
    def _engine_as_named(cls, value):
        return canonical_engine(value) if isinstance(value, str) else value  # vLLM, VLLM -> vllm

    @model_validator(mode="before")
    @classmethod
    def _read(cls, value):
        if value is None:
            value = {}
        if not isinstance(value, dict) or value.get("version") is not None:
            return value  # already read (a stored job config), or malformed: the field checks say why
        python = value.get("python")
        if python is not None and (not isinstance(python, str) or not python or len(python) > MAX_PATH):
            return value
        from workers.serving.vllm_engine import VllmError, engine_python, vllm_version  # the standard library only

        path = engine_python(python)
        try:
            version = vllm_version(path)
        except VllmError as exc:
            raise ValueError(f"python: {exc}") from None
        return {**value, "python": path, "version": version}


class Resources(Strict):
    num_cpus: float = Field(1, ge=0, le=4096)
    num_gpus: float = Field(
        0,
        ge=0,
        le=1024,
        description="a share of one GPU, one, or several whole GPUs of one node: a job given several "
        "splits its target's layers over them (a vLLM job: tensor parallelism)",
    )
    time_limit_s: float | None = Field(
        None, gt=0, le=30 * 86400, description="a job of this kind running longer is stopped and fails (on Ray)"
    )
    accelerator_type: str | None = Field(
        None,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.\-]+$",
        description="Ray's accelerator type (H100, A100, L4 ...): the GPU model "
        "jobs of this kind run on; part of a timing job's identity",
    )
    workers: int = Field(
        1,
        ge=1,
        le=1024,
        description="train_drafter only: Ray Train workers training one drafter together, each with "
        "num_cpus and num_gpus (more than 1: a TorchTrainer group; part of the job's identity)",
    )
    sharding: Literal["ddp", "fsdp"] = Field(
        "ddp",
        description="with workers > 1: ddp replicates the drafter on every worker; fsdp shards its "
        "parameters, gradients and optimizer state over them (FSDP2)",
    )

    @model_validator(mode="after")
    def _accelerator_needs_gpus(self):
        if self.accelerator_type is not None and self.num_gpus <= 0:
            raise ValueError(f"accelerator_type {self.accelerator_type} needs num_gpus > 0")
        if self.num_gpus > 1 and self.num_gpus != int(self.num_gpus):
            raise ValueError(
                f"num_gpus: {self.num_gpus:g} is more than one GPU but not a whole number; a target is split "
                "over whole GPUs"
            )
        if "sharding" in self.model_fields_set and self.workers == 1:
            raise ValueError(f"sharding: {self.sharding} shards over several workers; set workers > 1")
        return self
