"""Autotune: a tuned config from the database as an engine config (a re-tune from production
metrics: pipeline/autotune/retune.py).

The drafter path in an emitted config must point at something the engine can load: by
default the pairing's trained drafter is exported once into the work directory (the EAGLE-3
layout for EAGLE drafters; the Hugging Face folder itself for standalone draft models), or
the user names a path with --drafter-path.

What `specfleet autotune --engine vllm|sglang|trtllm|transformers --target T --drafter D` prints,
for one engine release (`--engine-version`; pipeline/autotune/engines/registry.py):
- vLLM: a `--speculative-config` JSON, with `num_speculative_tokens_per_batch_size` when a depth
  per batch size was measured;
- SGLang: its flags; a depth per batch size also writes the adaptive-steps file to
  `DIR/engine-configs/` (one pinned candidate per batch-size range) and adds the flags that
  switch it on;
- TensorRT-LLM: `speculative_config` YAML with `draft_len_schedule` in the release's own key
  semantics;
- transformers (standalone draft models only): HF assisted-generation settings, the
  batch-size-1 depth as `num_assistant_tokens`, a constant schedule and no confidence cut-off.
Where a release cannot express the schedule it gets the batch-size-1 depth at every batch size,
and a `note:` on stderr says so. When several active versions match (an offline choice and a
later production re-tune, or several conditions) the newest is used and stderr names the
others; `--condition` picks another, and versions on several kinds of hardware need
`--hardware`. Without `--drafter-path` the trained drafter is served as its family says: an
EAGLE-3 drafter exported once to `DIR/exports/` in the EAGLE-3 layout, or with
`--export-format speculators` in the speculators format that names its target (variants stock
engines cannot run are refused); a standalone draft model from its own folder. A `--method`
that disagrees with the family is an error, and so is a checkpoint or `--drafter-path` that is
not on this machine (it is named). When the depth is 0 at every batch size nothing is printed
on stdout (serve without speculation), stderr says so, and the exit status is 0.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.autotune.engines import registry as engines
from pipeline.core.artifacts import materialise
from pipeline.core.files import write_file
from pipeline.core.model_settings import SERVED_AS
from pipeline.core.schedule import check_schedule
from pipeline.core.sources import looks_like_path
from pipeline.errors import UserError

ENGINES = engines.ENGINES


METHODS = tuple(SERVED_AS.values())  # what specfleet's drafters are served as (vLLM's method names)


def pick_version(rows: list[dict], *, hardware: str | None, condition: str | None) -> tuple[dict, str | None]:
    """(row, note) among the active versions of one pairing: those matching --hardware and
    --condition, then the newest, since a production re-tune is newer than the offline choice it
    corrects. Several pairings or several hardware left is an error: which to deploy on is the
    user's to say. The note (None when one version matched) says which was taken over what."""
    matching = [r for r in rows if hardware in (None, r["hardware"]) and condition in (None, r["condition"])]
    listed = "; ".join(
        sorted(
            f"{r['target']}/{r['drafter']} on {r['hardware']}, condition {r['condition']} (v{r['version']})"
            for r in rows
        )
    )
    if not matching:
        raise UserError(
            "--target/--drafter/--hardware/--condition: no tuned config matches"
            + (f" (have: {listed})" if rows else "; run `specfleet run SPEC` first")
        )
    pairs = sorted({f"{r['target']}/{r['drafter']}" for r in matching})
    if len(pairs) > 1:
        raise UserError(f"--target/--drafter: {len(pairs)} pairings match ({', '.join(pairs)}); name one")
    machines = sorted({r["hardware"] for r in matching})
    if len(machines) > 1:
        raise UserError(
            f"--hardware: tuned on {len(machines)} kinds of hardware ({'; '.join(machines)}); "
            "name the one you deploy on"
        )
    chosen = max(matching, key=lambda r: (r["created_at"] or "", r["version"]))
    if not chosen.get("drafter_job_hash"):  # a production version: the drafter is the offline one's
        trained = next(
            (
                r["drafter_job_hash"]
                for r in rows
                if r.get("drafter_job_hash") and (r["target"], r["drafter"]) == (chosen["target"], chosen["drafter"])
            ),
            None,
        )
        chosen = {**chosen, "drafter_job_hash": trained}
    others = [r for r in matching if r["version"] != chosen["version"] or r["condition"] != chosen["condition"]]
    if not others:
        return chosen, None
    passed = ", ".join(f"condition {r['condition']} (v{r['version']}, {r['source']})" for r in others)
    return chosen, (
        f"using the newest of {len(matching)} active versions: condition {chosen['condition']} "
        f"(v{chosen['version']}, {chosen['source']}); not {passed}; --condition picks another"
    )


EXPORT_FORMATS = ("eagle3", "speculators")


def drafter_path(
    store, row: dict, workdir: Path, given: str | None, method: str | None = None, export_format: str = "eagle3"
) -> tuple[str, str]:
    """(path, vLLM method) for the row's drafter. A given path must exist when it names this
    machine's file system (a hub id is the engine's to fetch); its method is --method, else the
    recorded family's, else read from the folder. Without a path, the family's export of the
    trained checkpoint (written once under workdir/exports), and --method must agree with it."""
    _check_method(method)
    trained = _trained(store, row)
    if given:
        if looks_like_path(given) and not Path(given).expanduser().exists():
            raise UserError(f"--drafter-path: {given} does not exist on this machine")
        return given, method or _method_of(trained, given)
    if trained is None or trained.family is None:
        raise UserError(
            f"--drafter-path: no trained checkpoint (with its family) is recorded for "
            f"{row['target']}/{row['drafter']} (a drafter given by path: in its spec, or one trained "
            "by an older release); name the drafter's path"
        )
    try:  # a folder store's checkpoint in place; a remote store's fetched into this machine's cache
        if not trained.files_uri:
            raise ValueError("no checkpoint is recorded with it")
        checkpoint = materialise(trained.files_uri, trained.files_sha256)
    except (OSError, ValueError, RuntimeError) as exc:
        raise UserError(
            f"--drafter-path: the trained checkpoint of {row['target']}/{row['drafter']} cannot be read "
            f"here ({str(exc).splitlines()[0]}); name the drafter's path"
        ) from None
    family = _family(trained)
    if export_format != "eagle3" and family.name != "eagle3":
        raise UserError(
            f"--export-format: {row['drafter']} is a {family.name} drafter, served from its own folder; "
            f"the {export_format} format holds EAGLE-3 heads"
        )
    if method is not None and method != family.method:
        raise UserError(
            f"--method: {row['drafter']} is of the {family.name} family, served as {family.method}, "
            f"not {method}; drop --method, or name a --drafter-path that is a {method} drafter"
        )
    job = row["drafter_job_hash"]
    out = workdir / "exports" / (job if export_format == "eagle3" else f"{job}-{export_format}")
    try:
        return family.export(checkpoint, out, export_format, verifier=_verifier(store, job))
    except ValueError as exc:  # a variant no stock engine runs
        raise UserError(f"--engine: {exc}; pass --drafter-path to a checkpoint the engine can run") from None
    except RuntimeError as exc:  # a checkpoint that cannot be read
        raise UserError(
            f"--drafter-path: {str(exc).splitlines()[0]}; rerun its experiment or name the drafter's path"
        ) from None


def _verifier(store, job: str) -> str:
    """The target a trained drafter drafts for, as an engine names it: its hub id or folder, else its name."""
    target = (store.job_config(job) or {}).get("target") or {}
    name = target.get("hf") or target.get("name")
    if not name:
        raise UserError(
            f"--export-format: the database holds no target for drafter job {job[:12]}; the speculators "
            "format names the target it drafts for (export as eagle3)"
        )
    return name


def check_options(engine: str, version: str | None, method: str | None, export_format: str, path: str | None) -> None:
    """Refuse, before anything is read or stored, options this engine release cannot serve."""
    if export_format not in EXPORT_FORMATS:
        raise UserError(f"--export-format: {export_format!r}; use one of {', '.join(EXPORT_FORMATS)}")
    if export_format == "speculators" and engine != "vllm":
        raise UserError(f"--export-format: {engine} does not read the speculators format; use eagle3")
    _check_method(method)
    try:
        engines.check_version(engine, version)
        if method is not None:  # what the release refuses for this method, whatever the depth
            engines.emit(engine, [(1, 1, 1)], model=path or "drafter", method=method, version=version)
    except engines.EngineVersionError as exc:
        raise UserError(f"{exc.option}: {exc}") from None


def _check_method(method: str | None) -> None:
    if method is not None and method not in METHODS:
        raise UserError(
            f"--method: {method!r} is not a method specfleet's drafters are served as; use one of {', '.join(METHODS)}"
        )


def _trained(store, row: dict):
    """The row's recorded drafter training result, even when its checkpoint is not on this machine."""
    from pipeline.run.record import finished

    job = row.get("drafter_job_hash")
    return finished(store, "train_drafter", job, files_here=False) if job else None


def _family(trained):
    from workers.drafters.registry import family_of  # torch, only when a family is needed

    try:
        return family_of(trained.family)
    except ValueError as exc:
        raise UserError(f"--drafter-path: {exc}; name the drafter's path") from None


def _method_of(trained, given: str) -> str:
    """The method a named drafter is served as: its recorded family's when this release knows
    it, else what the folder's config says."""
    from workers.drafters.registry import FAMILIES, family_of

    if trained is not None and trained.family in FAMILIES:
        return family_of(trained.family).method
    config = Path(given).expanduser() / "config.json"
    if not config.is_file():
        raise UserError(
            f"--method: cannot tell what {given} is (no recorded drafter, no local config.json); "
            f"name it: {' or '.join(METHODS)}"
        )
    try:
        fields = json.loads(config.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"--drafter-path: {config} is not valid JSON ({exc})") from None
    if not isinstance(fields, dict):
        raise UserError(f"--drafter-path: {config} is not a model config (a JSON object)")
    kind = fields.get("speculators_model_type")
    if kind is not None and kind != "eagle3":
        raise UserError(
            f"--drafter-path: {given} is a speculators {kind!r} model; specfleet serves eagle3 heads and draft models"
        )
    eagle = (
        kind == "eagle3"
        or "draft_vocab_size" in fields
        or "eagle" in json.dumps(fields.get("architectures", [])).lower()
    )
    return "eagle3" if eagle else "draft_model"


def render(
    engine: str,
    schedule: list[tuple[int, int, int]],
    *,
    model: str,
    method: str,
    version: str | None = None,
    config_dir: Path | None = None,
    draft_sampling: str | None = None,
    tree=None,
    write_files: bool = True,
    block_drafting: str = "trained",
) -> engines.Emitted:
    """The engine config for one release (default: its current one), with the draft tree in place of
    the chain where that release runs it. Files it names (SGLang's adaptive steps) are written to
    `config_dir`, whole or not at all; not at all without `write_files` (their text is in `files`)."""
    check_schedule(schedule)
    if max(k for _, _, k in schedule) == 0 and not tree:
        raise UserError(
            "--engine: speculation does not pay for this pairing on this hardware (depth 0 "
            "at every batch size); serve without a drafter"
        )
    if engine not in engines.ENGINES:
        raise UserError(f"--engine: unknown engine {engine!r}; use one of {', '.join(engines.ENGINES)}")
    folder = (config_dir or Path(".")).resolve()
    try:
        out = engines.emit(
            engine,
            schedule,
            model=model,
            method=method,
            version=version,
            config_dir=str(folder),
            draft_sampling=draft_sampling,
            tree=tree,
            block_drafting=block_drafting,
        )
    except engines.EngineVersionError as exc:
        raise UserError(f"{exc.option}: {exc}") from None
    for name, text in out.files.items() if write_files else ():
        write_file(folder / name, text)
    return out
