"""What `specfleet validate` checks beyond a spec's fields, loading nothing, so that a run does not
fail a minute in on what could be known at once:

- every hub id the run loads (a target's or draft model's `hf`, an EAGLE-3 head's `path`) is
  whole in the hub cache, or the hub answers (pipeline/core/hub_cache.py);
- every drafter used as it is fits each target it is paired with, by the two config.json files
  (pipeline/core/config_fit.py): a local folder's, or a cached hub id's.

A GGUF file or package target has no config.json, a built-in model is made to fit: those pairings
are left to the run. Each problem names the spec field it comes from and its YAML line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from pipeline.core.config_fit import ModelConfig, draft_model_misfits, eagle3_misfits, read_config
from pipeline.core.hub_cache import HubAccess, look_up, unreachable
from pipeline.core.labels import shown
from pipeline.core.sources import looks_like_path
from pipeline.spec import ExperimentSpec, located


@dataclass(frozen=True)
class Loaded:
    """A model the run loads as it is, from a folder or hub id."""

    loc: tuple  # the spec field naming it, e.g. ("drafters", 1, "path")
    where: str  # the folder or hub id
    gguf: str | None  # a GGUF file's name in it (then there is no config.json to read)


def offline_errors(spec: ExperimentSpec, text: str, access: HubAccess) -> list[str]:
    """Every problem of `spec` (read from `text`) as `field.path: message (line N)`."""
    root = yaml.compose(text)
    return [located(root, loc, message) for loc, message in offline_problems(spec, access)]


def offline_problems(spec: ExperimentSpec, access: HubAccess) -> list[tuple[tuple, str]]:
    """(spec field, problem) for every hub id the run could not load and every drafter that does
    not fit a target it is paired with."""
    problems: list[tuple[tuple, str]] = []
    hub = _Hub(access)
    configs: dict[tuple, ModelConfig] = {}
    for item in _loaded(spec):
        file, problem = _config_file(item, hub)
        if problem is not None:
            problems.append((item.loc, problem))
        if file is None:
            continue
        try:
            configs[item.loc[:2]] = read_config(file)
        except LookupError as exc:
            problems.append((item.loc, str(exc)))
    drafter_at = {d.name: i for i, d in enumerate(spec.drafters)}
    target_at = {t.name: i for i, t in enumerate(spec.targets)}
    for target, drafter in dict.fromkeys((t.name, d.name) for t, d in spec.pairing_list()):
        t, d = target_at[target], drafter_at[drafter]
        target_config, drafter_config = configs.get(("targets", t)), configs.get(("drafters", d))
        if target_config is None or drafter_config is None:
            continue
        if spec.drafters[d].kind == "eagle3":
            field, misfits = "path", eagle3_misfits(drafter_config, target_config, target)
        else:
            field, misfits = "hf", draft_model_misfits(drafter_config, target_config, target)
        problems += [(("drafters", d, field), m) for m in misfits]
    return problems


def _loaded(spec: ExperimentSpec) -> list[Loaded]:
    """The targets and drafters the run loads from a folder or hub id, in spec order."""
    out = [
        Loaded(("targets", i, "hf"), t.hf, t.gguf)
        for i, t in enumerate(spec.targets)
        if t.hf is not None and t.package is None
    ]
    for i, d in enumerate(spec.drafters):
        if d.kind == "eagle3" and d.path is not None:
            out.append(Loaded(("drafters", i, "path"), d.path, None))
        elif d.kind == "standalone" and d.hf is not None:
            out.append(Loaded(("drafters", i, "hf"), d.hf, None))
    return out


class _Hub:
    """The hub as the workers will see it, asked at most once whether it answers."""

    def __init__(self, access: HubAccess):
        self.access = access
        self._asked = False
        self._why: str | None = None

    def unreachable(self) -> str | None:
        """Why the hub cannot be asked (pipeline/core/hub_cache.py), or None."""
        if not self._asked:
            self._why, self._asked = unreachable(self.access), True
        return self._why


def _config_file(item: Loaded, hub: _Hub) -> tuple[Path | None, str | None]:
    """(the config.json to compare, or None; why the run could not load it, or None)."""
    if looks_like_path(item.where):
        return (None if item.gguf is not None else Path(item.where).expanduser() / "config.json"), None
    cache = hub.access.cache
    try:
        cached = look_up(item.where, cache, item.gguf)
    except ValueError as exc:  # huggingface_hub's refusal of the name
        return None, f"{shown(item.where)} is no local path and no hub id ({str(exc).splitlines()[0]})"
    reason = hub.unreachable() if cached.missing is not None else None
    if reason is None:
        return cached.config, None
    fetch = f"hf download {item.where}" + (f" {item.gguf}" if item.gguf else "")
    fix = f"give a local folder path, set HF_HOME to where it is cached, or fill the cache ({fetch}) " + (
        "where the hub answers" if hub.access.offline else "and set HF_HUB_OFFLINE=1"
    )
    return cached.config, f"hub id {shown(item.where)} {cached.missing} ({cache}) and {reason}; {fix}"
