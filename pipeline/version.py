"""Code versions: what, besides its config, determines a job's result.

Each job kind hashes only the source it actually runs: the modules its entry points import,
followed statically through `workers.*` and `pipeline.*` imports. Changing how drafters are
trained then leaves trained targets reusable, while any change to code a job runs re-runs it.
"""
from __future__ import annotations

import ast
import hashlib
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
_LIBRARIES = ("torch", "transformers", "tokenizers")
# The dispatcher is hashed for every kind, but its (lazy) imports are not followed: they reach
# every kind's code. Each kind's own entry modules are listed instead and followed.
DISPATCH = "workers/jobs.py"
_COMMON = ("workers/device.py", "pipeline/types.py")
KIND_ROOTS = {
    "train_target": (*_COMMON, "workers/target.py"),
    "train_drafter": (*_COMMON, "workers/train_drafter.py", "workers/standalone.py"),
    "measure_curve": (*_COMMON, "workers/measure.py", "workers/train_drafter.py", "workers/standalone.py"),
    "profile_cost": (*_COMMON, "workers/cost.py", "workers/train_drafter.py", "workers/standalone.py"),
    "select_depth": (*_COMMON, "pipeline/acceptance.py", "pipeline/emitters.py"),
    "measure_speedup": (*_COMMON, "workers/speedup.py", "workers/train_drafter.py", "workers/standalone.py"),
}


def _local_imports(path: Path) -> set[Path]:
    """Files of this project that `path` imports (anywhere in it, lazy imports included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
        for name in names:
            if name.split(".")[0] in ("workers", "pipeline"):
                candidate = _ROOT / (name.replace(".", "/") + ".py")
                if candidate.is_file():
                    found.add(candidate)
    return found


def source_closure(roots: tuple[str, ...]) -> list[Path]:
    seen: set[Path] = set()
    todo = [_ROOT / r for r in roots]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        todo.extend(_local_imports(path) - seen)
    return sorted(seen)


@lru_cache(maxsize=None)
def code_version(kind: str | None = None) -> str:
    """'<package version>+<12 hex>' over one job kind's source (every kind's when None) and libraries."""
    roots = KIND_ROOTS[kind] if kind else tuple(r for rs in KIND_ROOTS.values() for r in rs)
    h = hashlib.sha256()
    for f in sorted({*source_closure(roots), _ROOT / DISPATCH}):
        h.update(f.relative_to(_ROOT).as_posix().encode() + b"\0" + f.read_bytes())
    h.update(f"python{sys.version_info[0]}.{sys.version_info[1]}".encode())  # the built-in corpora
    for lib in _LIBRARIES:
        h.update(f"{lib}=={_installed(lib)}".encode())
    return f"{_installed('specfleet')}+{h.hexdigest()[:12]}"


def _installed(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "0+unknown"
