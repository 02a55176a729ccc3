"""The experiment spec: the one place for experiment knobs (DESIGN.md rule 4).

`load_spec(path)` parses the YAML, validates it with pydantic (unknown keys rejected) and
raises `SpecError` carrying every problem at once as `field.path: message (line N)`.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import (
    AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator,
    model_validator,
)

from pipeline.errors import SpecError
from pipeline.yaml_lines import line_of

JOB_KINDS = ("train_target", "train_drafter", "measure_curve", "profile_cost", "select_depth", "measure_speedup")
DRAFTER_KINDS = ("eagle3", "standalone")
Corpus = Literal["stdlib", "pydoc", "chat"]
PROMPT_CONDITIONS = ("default", "template+bos", "template_no_bos", "no_template", "no_template_no_bos",
                     "long_context")
CHAT_ONLY = ("template+bos", "template_no_bos", "no_template", "no_template_no_bos")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TrainTarget(Strict):
    steps: int = Field(300, ge=1)
    lr: float = Field(2e-3, gt=0)
    batch_size: int = Field(16, ge=1)
    seq_len: int = Field(128, ge=8)


class BuiltinTarget(Strict):
    """A tiny Llama-architecture target trained in-process on a built-in corpus."""

    layers: int = Field(4, ge=4, description="at least 4 so low/mid/high captures are distinct")
    hidden_size: int = Field(128, ge=16)
    heads: int = Field(4, ge=1)
    intermediate_size: int = Field(384, ge=16)
    vocab_size: int = Field(1024, ge=300, le=65536)
    corpus: Corpus = "stdlib"
    train: TrainTarget = TrainTarget()

    @model_validator(mode="after")
    def _heads_divide(self):
        return _check_heads(self)


def _check_heads(model):
    if model.hidden_size % model.heads:
        raise ValueError(f"hidden_size {model.hidden_size} must be divisible by heads {model.heads}")
    if (model.hidden_size // model.heads) % 2:
        raise ValueError("hidden_size / heads must be even (rotary embeddings)")
    return model


class Target(Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    builtin: BuiltinTarget | None = None
    hf: str | None = Field(None, description="Hugging Face id or local path of a causal LM")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"

    @model_validator(mode="after")
    def _one_source(self):
        if (self.builtin is None) == (self.hf is None):
            raise ValueError("give exactly one of 'builtin' or 'hf'")
        if self.hf is not None and _looks_like_path(self.hf):
            p = Path(self.hf).expanduser()
            if not (p / "config.json").is_file():
                raise ValueError(f"hf: no model at local path {self.hf} (config.json not found)")
        return self


class TrainDrafter(Strict):
    ttt_depth: int = Field(2, ge=1, le=16)
    steps: int = Field(200, ge=1)
    lr: float = Field(3e-3, gt=0)
    batch_size: int = Field(16, ge=1)
    seq_len: int = Field(128, ge=8)
    corpus: Corpus = "stdlib"

    @model_validator(mode="after")
    def _chains_fit(self):
        if self.ttt_depth >= self.seq_len - 1:
            raise ValueError(f"ttt_depth {self.ttt_depth} must be < seq_len - 1 = {self.seq_len - 1}")
        return self


class Eagle3Drafter(Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    kind: Literal["eagle3"] = "eagle3"
    norm: Literal["pre", "post"] = "pre"
    fc_norm: bool = False
    fusion: Literal["tri", "last"] = "tri"
    attention: Literal["standard", "gated"] = "standard"
    draft_vocab: int | None = Field(None, ge=16, description="most frequent target tokens the head covers")
    capture_layers: list[Annotated[int, Field(ge=0)]] | None = Field(
        None, description="indices into the target's hidden_states; default: EAGLE-3's low/mid/high")
    train: TrainDrafter = TrainDrafter()

    @model_validator(mode="after")
    def _capture_count(self):
        want = 3 if self.fusion == "tri" else 1
        if self.capture_layers is not None and len(self.capture_layers) != want:
            raise ValueError(f"capture_layers: fusion '{self.fusion}' takes {want} layer(s), "
                             f"got {len(self.capture_layers)}")
        return self


class TrainStandalone(TrainTarget):
    corpus: Corpus = "stdlib"


class BuiltinStandalone(Strict):
    """A small causal LM trained in-process with the target's tokenizer."""

    layers: int = Field(2, ge=1)
    hidden_size: int = Field(64, ge=16)
    heads: int = Field(4, ge=1)
    intermediate_size: int = Field(192, ge=16)
    train: TrainStandalone = TrainStandalone()

    @model_validator(mode="after")
    def _heads_divide(self):
        return _check_heads(self)


class StandaloneDrafter(Strict):
    """The classic draft/target pairing: an independent causal LM sharing the target's tokenizer."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    kind: Literal["standalone"]
    builtin: BuiltinStandalone | None = None
    hf: str | None = Field(None, description="Hugging Face id or local path of a causal LM")

    @model_validator(mode="after")
    def _one_source(self):
        if (self.builtin is None) == (self.hf is None):
            raise ValueError("give exactly one of 'builtin' or 'hf'")
        if self.hf is not None and _looks_like_path(self.hf):
            if not (Path(self.hf).expanduser() / "config.json").is_file():
                raise ValueError(f"hf: no model at local path {self.hf} (config.json not found)")
        return self


def _drafter_kind(value) -> str:
    kind = value.get("kind", "eagle3") if isinstance(value, dict) else getattr(value, "kind", None)
    return kind if kind in DRAFTER_KINDS else "eagle3"


# A registry of drafter kinds: each kind is one spec class, selected by the `kind` field.
Drafter = Annotated[
    Annotated[Eagle3Drafter, Tag("eagle3")] | Annotated[StandaloneDrafter, Tag("standalone")],
    Discriminator(_drafter_kind),
]


class Pairing(Strict):
    target: str
    drafter: str


def _condition_name(value):
    """'long_context' stays; {noise: hidden, a: 0.5} becomes 'hidden_noise@0.5'."""
    if isinstance(value, dict):
        extra = set(value) - {"noise", "a"}
        if extra or value.get("noise") not in ("hidden", "embedding"):
            raise ValueError("a noise condition is {noise: hidden|embedding, a: <level>}")
        level = float(value.get("a", 0.0))
        if not 0 <= level <= 10:
            raise ValueError(f"noise level a must lie in 0..10, got {level}")
        return f"{value['noise']}_noise@{level:g}"
    if value not in PROMPT_CONDITIONS:
        raise ValueError(f"unknown condition {value!r}; use one of {', '.join(PROMPT_CONDITIONS)} "
                         "or {noise: hidden|embedding, a: <level>}")
    return value


Condition = Annotated[str | dict, AfterValidator(_condition_name)]


class Evaluation(Strict):
    max_depth: int = Field(6, ge=1, le=32)
    temperatures: list[Annotated[float, Field(ge=0.0, le=2.0)]] = Field([0.0], min_length=1)
    num_prompts: int = Field(32, ge=1)
    prompt_len: int = Field(48, ge=8, description="prompt tokens (held-out text, or a chat turn up to the answer)")
    continuation_len: int = Field(32, ge=1, description="target-generated tokens; one chain starts at each")
    corpus: Corpus = "stdlib"
    conditions: list[Condition] = Field(["default"], min_length=1)
    long_context_len: int = Field(512, ge=16, description="prompt tokens under the long_context condition")

    @model_validator(mode="after")
    def _chat_conditions(self):
        for c in self.conditions:
            if c in CHAT_ONLY and self.corpus != "chat":
                raise ValueError(f"condition '{c}' changes a chat template: it needs corpus: chat")
        if len(set(self.conditions)) != len(self.conditions):
            raise ValueError("conditions: each condition once")
        return self


class Cost(Strict):
    context_len: int = Field(128, ge=1, description="cached context length the steps are timed at")
    warmup: int = Field(5, ge=0)
    repeats: int = Field(30, ge=1)
    cost_ratio: float | None = Field(None, gt=0, description="override the measured draft/decode ratio")
    batch_sizes: list[Annotated[int, Field(ge=1)]] = Field([1], description="batch sizes to profile; the first is 1")
    max_batch_size: int = Field(256, ge=1, description="the per-batch-size schedule covers 1..max_batch_size")

    @model_validator(mode="after")
    def _batches(self):
        if self.batch_sizes[:1] != [1] or self.batch_sizes != sorted(set(self.batch_sizes)):
            raise ValueError(f"batch_sizes must increase and start at 1, got {self.batch_sizes}")
        if self.max_batch_size < self.batch_sizes[-1]:
            raise ValueError(f"max_batch_size {self.max_batch_size} is below the largest batch size profiled")
        return self


class Validation(Strict):
    """Run the real speculative engine at every depth and compare with the predicted speedup."""

    num_prompts: int = Field(8, ge=1, description="held-out prompts decoded at every depth k = 0..max_depth")
    new_tokens: int | None = Field(None, ge=2, description="tokens decoded per prompt and depth (default: "
                                                            "evaluation.continuation_len, as far as chains were measured)")
    repeats: int = Field(1, ge=1, description="passes over the prompts")
    warmup_prompts: int = Field(1, ge=0, description="prompts decoded untimed first, at every depth")
    tolerance: float = Field(0.05, ge=0, lt=1, description="the chosen depth must reach (1 - tolerance) x "
                                                             "the best measured tokens/s")


class Resources(Strict):
    num_cpus: float = Field(1, ge=0)
    num_gpus: float = Field(0, ge=0)


def _default_resources() -> dict[str, Resources]:
    return {k: Resources() for k in JOB_KINDS}


class ExperimentSpec(Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    seed: int = 0
    targets: list[Target] = Field(min_length=1)
    drafters: list[Drafter] = Field(min_length=1)
    pairings: Literal["all"] | list[Pairing] = "all"
    evaluation: Evaluation = Evaluation()
    cost: Cost = Cost()
    validation: Validation | None = None
    resources: dict[Literal[JOB_KINDS], Resources] = Field(default_factory=_default_resources)

    @field_validator("pairings")
    @classmethod
    def _some_pairings(cls, value):
        if value != "all" and not value:
            raise ValueError("give 'all' or at least one {target, drafter} pair")
        return value

    def resources_for(self, kind: str) -> Resources:
        return self.resources.get(kind, Resources())

    def pairing_list(self) -> list[tuple[Target, Eagle3Drafter | StandaloneDrafter]]:
        """The (target, drafter) pairs to run, in spec order."""
        if self.pairings == "all":
            return [(t, d) for t in self.targets for d in self.drafters]
        by_t = {t.name: t for t in self.targets}
        by_d = {d.name: d for d in self.drafters}
        return [(by_t[p.target], by_d[p.drafter]) for p in self.pairings]

    def content_hash(self) -> str:
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()


def cross_check(data: dict) -> list[tuple[tuple, str]]:
    """Checks across fields, run on the raw YAML so they report alongside field errors."""
    problems: list[tuple[tuple, str]] = []
    names: dict[str, set] = {}
    for field in ("targets", "drafters"):
        seen: set = set()
        items = data.get(field)
        for i, item in enumerate(items if isinstance(items, list) else []):
            name = item.get("name") if isinstance(item, dict) else None
            if name in seen:
                problems.append(((field, i, "name"), f"duplicate name '{name}'"))
            seen.add(name)
        names[field] = seen
    pairings = data.get("pairings")
    for i, p in enumerate(pairings if isinstance(pairings, list) else []):
        for key, field in (("target", "targets"), ("drafter", "drafters")):
            if isinstance(p, dict) and key in p and p[key] not in names[field]:
                have = sorted(n for n in names[field] if isinstance(n, str))
                problems.append((("pairings", i, key), f"unknown {key} '{p[key]}' (have {have})"))
    evaluation = data.get("evaluation")
    conditions = evaluation.get("conditions") if isinstance(evaluation, dict) else None
    if data.get("validation") is not None and isinstance(conditions, list) and conditions \
            and isinstance(conditions[0], dict) and "noise" in conditions[0]:
        problems.append((("validation",), "the engine drafts without noise, so it cannot validate the depth "
                                          "chosen for a noise condition; list a prompt condition first"))
    resources = data.get("resources") if isinstance(data.get("resources"), dict) else {}
    timed = [resources.get(kind) if isinstance(resources.get(kind), dict) else {}
             for kind in ("profile_cost", "measure_speedup")]
    placed = [(r.get("num_cpus", 1), r.get("num_gpus", 0)) for r in timed]
    if data.get("validation") is not None and placed[0] != placed[1]:
        problems.append((("resources", "measure_speedup"), f"give it what profile_cost has (num_cpus, num_gpus = "
                                                          f"{placed[0]}, here {placed[1]}): the engine's speed is "
                                                          "compared with costs timed there"))
    return problems


def _looks_like_path(s: str) -> bool:
    return s.startswith(("/", "./", "../", "~")) or Path(s).exists()


def _field_path(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).startswith(("function-after", "function-wrap", "tagged-union")):
            continue  # pydantic's internal validator names are not fields the user wrote
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _clean_loc(loc: tuple) -> tuple:
    # A discriminated union puts the tag value (the drafter kind) right after the list index: drop it.
    out: list = []
    for part in loc:
        if out[-2:-1] == ["drafters"] and isinstance(out[-1], int) and part in DRAFTER_KINDS:
            continue
        if isinstance(part, str) and part.startswith(("literal[", "list[")):
            continue  # which branch of a union pydantic tried: not a field the user wrote
        out.append(part)
    return tuple(out)


def parse_spec(text: str, source: str = "<spec>") -> ExperimentSpec:
    """Validate YAML text; raise SpecError listing every problem with its YAML line."""
    try:
        data = yaml.safe_load(text)
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(source, [f"(yaml): {problem}{where}"]) from None
    if not isinstance(data, dict):
        raise SpecError(source, ["(top level): must be a mapping of experiment fields"])
    problems = cross_check(data)
    try:
        spec = ExperimentSpec.model_validate(data)
    except ValidationError as exc:
        problems += _merge_union_errors([_describe(err) for err in exc.errors()])
        spec = None
    if problems:
        messages = []
        for loc, msg in problems:
            line = line_of(root, loc)
            where = f" (line {line})" if line else ""
            messages.append(f"{_field_path(loc)}: {msg}{where}")
        raise SpecError(source, messages)
    return spec


def _merge_union_errors(problems: list[tuple[tuple, str]]) -> list[tuple[tuple, str]]:
    """A value that fits no branch of a union yields one error per branch: join them per field."""
    merged: dict[tuple, list[str]] = {}
    for loc, msg in problems:
        if any(other[: len(loc)] == loc and len(other) > len(loc) for other, _ in problems):
            continue  # a branch that failed deeper inside says more than one that failed here
        merged.setdefault(loc, []).append(msg)
    return [(loc, msgs[0] if len(msgs) == 1 else " or ".join(msgs)) for loc, msgs in merged.items()]


def _describe(err: dict) -> tuple[tuple, str]:
    loc = _clean_loc(tuple(err["loc"]))
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    elif loc and loc[-1] == "[key]":
        loc = loc[:-1]
        msg = f"unknown job kind; use one of {', '.join(JOB_KINDS)}"
    elif "input" in err and err["type"] != "missing" and not isinstance(err["input"], (dict, list)):
        msg = f"{msg}, got {err['input']!r}"
    return loc, msg


def load_spec(path: str | Path) -> tuple[ExperimentSpec, str]:
    """Read and validate a spec file; return the spec and its raw text."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(str(path), [f"(file): no such spec file {path}"])
    text = p.read_text(encoding="utf-8")
    return parse_spec(text, str(path)), text
