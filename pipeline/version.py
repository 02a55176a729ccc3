"""Code versions: what, besides its config, determines a job's result.

Each job hashes only the source it runs: the modules its kind's registry entry names
(pipeline/core/kinds.py; a drafter-training job adds its family's trainer), followed through
every import of this project's packages, in any
form (`import a.b`, `from a import b`, `from a.b import c`, relative imports, imports inside
functions), with the `__init__` of every package on the way. Functions the registry names as
"module:function" strings are not followed: a kind lists the modules it runs that way.
Changing how drafters are trained then leaves trained targets reusable, while any change to
code a job runs re-runs it.
"""
from __future__ import annotations

import ast
import hashlib
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from pipeline.core.kinds import DRAFTER_TRAINERS, KINDS

_ROOT = Path(__file__).resolve().parent.parent
_PACKAGES = ("workers", "pipeline", "db")
_LIBRARIES = ("torch", "transformers", "tokenizers")


def module_file(name: str, root: Path = _ROOT) -> Path | None:
    """The source file of a project module or package ('workers.measure' -> workers/measure.py)."""
    if name.split(".")[0] not in _PACKAGES:
        return None
    base = root / name.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_names(path: Path, root: Path) -> set[str]:
    """Every module name `path` may import: for `from a import b`, both `a` and `a.b`."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, `level - 1` packages up
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - (node.level - 1)] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


def _with_packages(name: str) -> list[str]:
    """'a.b.c' -> ['a', 'a.b', 'a.b.c']: importing a module runs every package above it."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def source_closure(modules: tuple[str, ...], root: Path = _ROOT) -> list[Path]:
    """The project files that importing `modules` runs (lazy imports counted as run)."""
    seen: set[Path] = set()
    todo = [n for m in modules for n in _with_packages(m)]
    while todo:
        path = module_file(todo.pop(), root)
        if path is None or path in seen:
            continue
        seen.add(path)
        todo.extend(n for name in _imported_names(path, root) for n in _with_packages(name))
    return sorted(seen)


def source_version(modules: tuple[str, ...] | None = None, root: Path = _ROOT) -> str:
    """'<package version>+<12 hex>' over the source `modules` run (a job's, from its kind's
    `code_of(config)`; the whole code base when None) under `root`, and the libraries that
    shape results."""
    if modules is None:
        modules = (*(m for k in KINDS.values() for m in k.code),
                   *(path.partition(":")[0] for path in DRAFTER_TRAINERS.values()))
    h = hashlib.sha256()
    for f in source_closure(modules, root):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    h.update(f"python{sys.version_info[0]}.{sys.version_info[1]}".encode())  # the built-in corpora
    for lib in _LIBRARIES:
        h.update(f"{lib}=={_installed(lib)}".encode())
    return f"{_installed('specfleet')}+{h.hexdigest()[:12]}"


@lru_cache(maxsize=None)
def code_version(modules: tuple[str, ...] | None = None) -> str:
    """This installation's code version of the source `modules` run (the whole code base when None)."""
    return source_version(modules)


def _installed(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "0+unknown"
