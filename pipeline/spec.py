"""The experiment spec: a YAML spec file is the one place where an experiment's knobs are set.

`load_spec(path)` parses the YAML, validates it with pydantic (unknown keys rejected) and
raises `SpecError` carrying every problem at once as `field.path: message (line N)`.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from pipeline.core.kinds import JOB_KINDS, KINDS
from pipeline.core.labels import shown
from pipeline.core.model_settings import DRAFTER_KINDS, DrafterSpec, Target
from pipeline.core.settings import (
    NAME,
    Cost,
    Evaluation,
    Pairing,
    PromptsFile,
    Resources,
    Serving,
    Strict,
    TrainingData,
    Validation,
)
from pipeline.errors import SpecError
from pipeline.run.runtime_env import RuntimeEnv
from pipeline.spec_keys import known_keys, nearest_key
from pipeline.yaml_lines import duplicate_keys, line_of


def _default_resources() -> dict[str, Resources]:
    return {name: kind.resources for name, kind in KINDS.items()}


class ExperimentSpec(Strict):
    name: str = NAME
    seed: int = Field(0, ge=0, lt=2**63, strict=True)
    targets: list[Target] = Field(min_length=1, max_length=64)
    drafters: list[DrafterSpec] = Field(min_length=1, max_length=64)
    pairings: Literal["all"] | list[Pairing] = "all"
    evaluation: Evaluation = Evaluation()
    cost: Cost = Cost()
    validation: Validation | None = None
    serving: Serving | None = None  # the serving engine judges each choice (the serve_check kind)
    training_data: TrainingData = TrainingData()
    resources: dict[Literal[JOB_KINDS], Resources] = Field(default_factory=_default_resources)
    runtime_env: RuntimeEnv | None = None  # what Ray gives the worker processes (pipeline/run/runtime_env.py)

    @field_validator("runtime_env")
    @classmethod
    def _no_secret_in_the_file(cls, value: RuntimeEnv | None):
        for name in value.literal_secrets() if value is not None else ():
            raise ValueError(
                f"env_vars.{name}: the spec is stored with the experiment, so a secret is not written "
                f"in it: write {name}: ${{{name}}} and export {name} where the run starts"
            )
        return value

    @field_validator("pairings")
    @classmethod
    def _some_pairings(cls, value):
        if value != "all" and not value:
            raise ValueError("give 'all' or at least one {target, drafter} pair")
        return value

    @model_validator(mode="after")
    def _trained_on_other_prompts(self):
        train, evaluate = self.training_data.prompts, self.evaluation.prompts
        if train is not None and evaluate is not None and train.digest == evaluate.digest:
            raise ValueError(
                f"training_data.prompts and evaluation.prompts are the same file ({evaluate.path}): the "
                "curve would measure prompts the drafters trained on; split it in two"
            )
        return self

    @model_validator(mode="after")
    def _validated_on_the_curves_prompts(self):
        validation, curve = self.validation, self.evaluation.num_prompts
        if validation is not None and validation.prompts == "curve" and validation.num_prompts > curve:
            raise ValueError(
                f"validation.num_prompts: {validation.num_prompts} of the curve's prompts, but it measured "
                f"{curve} (evaluation.num_prompts); validate on at most {curve}, or on held-out prompts"
            )
        return self

    @model_validator(mode="after")
    def _validation_prompts_fit(self):
        prompts, validation = self.evaluation.prompts, self.validation
        if (
            prompts is not None
            and validation is not None
            and validation.prompts == "heldout"
            and prompts.conversations is not None
        ):
            need = self.evaluation.num_prompts + validation.num_prompts
            if prompts.conversations < need:
                raise ValueError(
                    f"evaluation.prompts: {prompts.path} holds {prompts.conversations} conversation(s); "
                    f"the curve's {self.evaluation.num_prompts} and validation's "
                    f"{validation.num_prompts} held-out prompts need {need}"
                )
        return self

    @model_validator(mode="after")
    def _validated_where_measured(self):
        validation, measured = self.validation, self.evaluation.continuation_len
        if validation is not None and validation.new_tokens is not None and validation.new_tokens > measured:
            raise ValueError(
                f"validation.new_tokens: {validation.new_tokens} decodes past the {measured} positions the "
                f"curve measures (evaluation.continuation_len), so the prediction it checks says nothing of "
                f"the rest; raise evaluation.continuation_len to {validation.new_tokens} or drop new_tokens"
            )
        return self

    @model_validator(mode="after")
    def _workers_share_the_batch(self):
        for kind, r in self.resources.items():
            if r.workers > 1 and kind != "train_drafter":
                raise ValueError(f"resources.{kind}.workers: only train_drafter jobs run on several workers")
        n = self.resources_for("train_drafter").workers
        for i, d in enumerate(self.drafters if n > 1 else ()):
            if not d.trained_here:
                continue
            if d.kind == "standalone":
                raise ValueError(
                    f"resources.train_drafter.workers: drafters[{i}] ({d.name}) is a standalone draft model, "
                    "trained in one process; give it a spec of its own with workers: 1"
                )
            if d.train.batch_size % n:
                raise ValueError(
                    f"drafters[{i}].train.batch_size: {d.train.batch_size} rows do not split over the "
                    f"{n} workers of resources.train_drafter; use a multiple of {n}"
                )
        return self

    def evaluation_for(self, drafter: DrafterSpec) -> Evaluation:
        """The evaluation of a pairing with `drafter`: the spec's, measured no deeper than the drafter
        drafts. A DFlash drafter drafts at most block_size - 1 tokens a pass, so its curve, cost table,
        depth choice and checks end there (one spec compares blocks of several sizes)."""
        if drafter.kind == "dflash" and drafter.block_size - 1 < self.evaluation.max_depth:
            return self.evaluation.model_copy(update={"max_depth": drafter.block_size - 1})
        return self.evaluation

    def resources_for(self, kind: str) -> Resources:
        return self.resources.get(kind, KINDS[kind].resources)

    def pairing_list(self) -> list[tuple[Target, DrafterSpec]]:
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
            if not isinstance(name, str):
                continue  # a missing or non-text name is the field check's to report
            if name in seen:
                problems.append(((field, i, "name"), f"duplicate name '{name}'"))
            seen.add(name)
        names[field] = seen
    pairings = data.get("pairings")
    for i, p in enumerate(pairings if isinstance(pairings, list) else []):
        for key, field in (("target", "targets"), ("drafter", "drafters")):
            if isinstance(p, dict) and isinstance(p.get(key), str) and p[key] not in names[field]:
                have = sorted(n for n in names[field] if isinstance(n, str))
                problems.append((("pairings", i, key), f"unknown {key} '{p[key]}' (have {have})"))
    for section in ("evaluation", "training_data"):
        given = data.get(section).get("prompts") if isinstance(data.get(section), dict) else None
        for key in sorted(set(given) & set(PromptsFile.filled_in) if isinstance(given, dict) else ()):
            problems.append(((section, "prompts", key), "specfleet fills this in when it reads the file; drop it"))
    serving = data.get("serving")
    for key in sorted(set(serving) & set(Serving.filled_in) if isinstance(serving, dict) else ()):
        problems.append((("serving", key), "specfleet reads this from the engine's environment; drop it"))
    evaluation = data.get("evaluation")
    conditions = evaluation.get("conditions") if isinstance(evaluation, dict) else None
    temperatures = evaluation.get("temperatures") if isinstance(evaluation, dict) else None
    first = temperatures[0] if isinstance(temperatures, list) and temperatures else 0
    if serving is not None and isinstance(first, int | float) and first != 0:
        problems.append(
            (
                ("serving",),
                "the serving check decodes greedily (its output must equal plain decoding), but the depth "
                f"is chosen at the evaluation's first temperature, {first:g}; list 0 first",
            )
        )
    for section in ("validation", "serving"):
        if (
            data.get(section) is not None
            and isinstance(conditions, list)
            and conditions
            and isinstance(conditions[0], dict)
            and "noise" in conditions[0]
        ):
            problems.append(
                (
                    (section,),
                    "the engine drafts without noise, so it cannot validate the depth "
                    "chosen for a noise condition; list a prompt condition first",
                )
            )
    cost = data.get("cost") if isinstance(data.get("cost"), dict) else {}
    by_engine = cost.get("timed_by") == "vllm"
    if by_engine and serving is None:
        problems.append((("cost", "timed_by"), "vllm times costs in the engine a `serving:` section names; add one"))
    if by_engine and cost.get("cost_ratio") is not None:
        problems.append((("cost", "cost_ratio"), "a given ratio replaces timed costs; drop it, or timed_by: vllm"))
    resources = data.get("resources") if isinstance(data.get("resources"), dict) else {}

    def placed(kind: str) -> tuple:
        r = resources.get(kind) if isinstance(resources.get(kind), dict) else {}
        return r.get("num_cpus", 1), r.get("num_gpus", 0), r.get("accelerator_type")

    # the timing kinds the spec plans, each compared with the costs
    planned = {
        "measure_speedup": data.get("validation") is not None,
        "serve_check": serving is not None,
        "engine_cost": by_engine,
    }
    for kind, here in ((kind, placed(kind)) for kind, used in planned.items() if used):
        if placed("profile_cost") != here:
            problems.append(
                (
                    ("resources", kind),
                    f"give it what profile_cost has (num_cpus, num_gpus, "
                    f"accelerator_type = {placed('profile_cost')}, here {here}): the "
                    "engine's speed is compared with costs timed there",
                )
            )
    return problems


def _field_path(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).startswith(("function-after", "function-wrap", "tagged-union")):
            continue  # pydantic's internal validator names are not fields the user wrote
        elif not re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+", str(part)):
            out += f"[{str(part)!r}]"  # a key with spaces, newlines or other odd characters, quoted
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
        _check_shape(text)
        data = yaml.safe_load(text)
        root = yaml.compose(text)
    except _Refused as exc:
        raise SpecError(source, [str(exc)]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(source, [f"(yaml): {problem}{where}"]) from None
    if not isinstance(data, dict):
        raise SpecError(source, ["(top level): must be a mapping of experiment fields"])
    twice = [f"{_field_path(loc)}: key given twice (lines {a} and {b}); keep one" for loc, a, b in duplicate_keys(root)]
    if twice:  # the parsed data holds only the second of each: validating it would check the wrong spec
        raise SpecError(source, twice)
    problems = cross_check(data)
    try:
        spec = ExperimentSpec.model_validate(data)
    except ValidationError as exc:
        problems += _merge_union_errors([_describe(err) for err in exc.errors()])
        spec = None
    if problems:
        raise SpecError(source, [located(root, loc, msg) for loc, msg in problems])
    return spec


def located(root, loc: tuple, msg: str) -> str:
    """A problem as every spec error reads: `field.path: message (line N)`; root: the composed YAML."""
    line = line_of(root, loc)
    return f"{_field_path(loc)}: {msg}" + (f" (line {line})" if line else "")


def _merge_union_errors(problems: list[tuple[tuple, str]]) -> list[tuple[tuple, str]]:
    """A value that fits no branch of a union yields one error per branch: join them per field."""
    merged: dict[tuple, list[str]] = {}
    for loc, msg in problems:
        if any(other[: len(loc)] == loc and len(other) > len(loc) for other, _ in problems):
            continue  # a branch that failed deeper inside says more than one that failed here
        merged.setdefault(loc, []).append(msg)
    return [(loc, msgs[0] if len(msgs) == 1 else " or ".join(msgs)) for loc, msgs in merged.items()]


def _path_loc(path: str) -> tuple:
    """'drafters[0].block_size' -> ('drafters', 0, 'block_size')."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"\.|\[|\]\.?", path) if part)


def _describe(err: dict) -> tuple[tuple, str]:
    loc = _clean_loc(tuple(err["loc"]))
    msg = err["msg"].removeprefix("Value error, ")
    named = re.fullmatch(r"([a-z_]+(?:\[\d+\])?(?:\.[a-z_]+(?:\[\d+\])?)+): (.+)", msg, re.S) if not loc else None
    if named:  # a check across sections names the field it is about: point at that field's line
        loc, msg = _path_loc(named.group(1)), named.group(2)
    if err["type"] == "extra_forbidden":
        msg = _unknown_key(tuple(err["loc"]), loc)
    elif err["type"] == "union_tag_not_found" and len(loc) == 2 and loc[0] == "drafters":
        loc, got = (*loc, "kind"), err["input"].get("kind") if isinstance(err["input"], dict) else err["input"]
        msg = (
            f"unknown drafter kind {shown(got) if isinstance(got, str) else repr(got)}; "
            f"use one of {', '.join(DRAFTER_KINDS)}"
        )
    elif loc and loc[-1] == "[key]":
        loc = loc[:-1]
        msg = f"unknown job kind; use one of {', '.join(JOB_KINDS)}"
    elif (
        "input" in err
        and err["type"] != "missing"
        and not isinstance(err["input"], (dict, list))
        and not (isinstance(err["input"], str) and err["input"] in msg)
    ):  # the message names it already
        got = err["input"]
        msg = f"{msg}, got {shown(got) if isinstance(got, str) else repr(got)}"
    return loc, msg


def _unknown_key(raw: tuple, loc: tuple) -> str:
    """'unknown key', with the section it is in and the known key it most likely misspells."""
    key = str(loc[-1])
    where = f" in {_field_path(loc[:-1])}" if loc[:-1] else ""
    nearest = nearest_key(key, known_keys(ExperimentSpec, raw[:-1]))
    return f"unknown key {shown(key)}{where}" + (f": did you mean {shown(nearest)}?" if nearest else "")


MAX_SPEC_BYTES = 1 << 20  # a spec is a page of settings; a megabyte is already absurd
MAX_DEPTH = 32  # nesting of mappings and lists; a spec needs 5
MAX_ALIASES = 64  # YAML aliases (*name); a chain of them can expand exponentially


class _Refused(Exception):
    """A spec text refused before it is parsed: the one-line reason."""


def _check_shape(text: str) -> None:
    """Refuse, without building anything, YAML nested deeper than MAX_DEPTH (the parser would
    recurse until Python's stack gives out) or with more than MAX_ALIASES aliases (a few lines of
    them can stand for billions of nodes)."""
    depth = aliases = 0
    for event in yaml.parse(text):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise _Refused(f"(yaml): nested deeper than {MAX_DEPTH} levels (line {event.start_mark.line + 1})")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                raise _Refused(f"(yaml): more than {MAX_ALIASES} aliases (line {event.start_mark.line + 1})")


def load_spec(path: str | Path) -> tuple[ExperimentSpec, str]:
    """Read and validate a spec file; return the spec and its raw text."""
    p = Path(path)
    source = str(path) if len(str(path)) <= 200 else shown(str(path), 200)  # a path too long to read, cut
    try:
        if not p.is_file():
            raise SpecError(source, [f"(file): no such spec file {source}"])
        size = p.stat().st_size
        if size > MAX_SPEC_BYTES:
            raise SpecError(
                str(path), [f"(file): larger than {MAX_SPEC_BYTES} bytes ({size}); a spec is a page of settings"]
            )
        text = p.read_bytes().decode("utf-8")
    except OSError as exc:  # a path the system refuses (too long) or a file it cannot read
        raise SpecError(source, [f"(file): cannot read it: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError as exc:
        raise SpecError(str(path), [f"(file): not UTF-8 text ({exc.reason} at byte {exc.start})"]) from None
    return parse_spec(text, str(path)), text
