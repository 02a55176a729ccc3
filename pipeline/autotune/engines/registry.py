"""Engine configs from a per-batch-size depth schedule, one module per serving engine.

Each engine module knows, per release range, the field names, how the engine reads a depth
schedule and what it refuses, as read from the engine's own source (the module docstrings
name the files and releases). `emit(engine, schedule, model=..., method=..., version=...)`
returns what to print, any file the engine reads beside it, and notes on what that release
cannot express (it then gets the batch-size-1 depth at every batch size).
"""

from __future__ import annotations

import dataclasses

from packaging.version import Version

from pipeline.autotune.engines import sglang, transformers, trtllm, vllm
from pipeline.autotune.engines.common import Emitted, EngineVersionError, parse_version

MODULES = {m.NAME: m for m in (vllm, sglang, trtllm, transformers)}
ENGINES = tuple(MODULES)


def check_version(engine: str, version: str | None) -> Version:
    """The release to write for, refused (EngineVersionError) before anything is stored."""
    module = MODULES[engine]
    return parse_version(engine, version or module.DEFAULT_VERSION, module.OLDEST)


def emit(
    engine: str,
    schedule,
    *,
    model: str,
    method: str,
    version: str | None = None,
    config_dir: str = ".",
    draft_sampling: str | None = None,
    tree=None,
) -> Emitted:
    """The engine's config for `schedule` at `version` (default: the engine's current release);
    files it names are to be written to `config_dir`. `draft_sampling`: at temperature > 0, how
    the curve drew and verified drafts ("sampled" or "greedy"); None at temperature 0. `tree`: a
    draft tree (pipeline/core/trees.py) to run instead of the chain; a release that cannot run it as
    chosen gets the chain, with a note saying why."""
    module = MODULES[engine]
    v = check_version(engine, version)
    out = module.emit(
        list(schedule),
        model=model,
        method=method,
        version=v,
        config_dir=config_dir,
        draft_sampling=draft_sampling,
        tree=tree,
    )
    if v > Version(module.NEWEST):
        note = f"{engine} {v} is newer than the newest release read ({module.NEWEST}): written as for that one"
        out = dataclasses.replace(out, notes=(*out.notes, note))
    return out


__all__ = ["ENGINES", "Emitted", "EngineVersionError", "check_version", "emit"]
