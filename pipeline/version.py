"""Code versions: what, besides its config, determines a job's result.

Each job hashes only the source it runs: the modules its kind's registry entry names
(pipeline/core/kinds.py; a drafter-training job adds its family's trainer), followed through
every import of this project's packages, in any form (`import a.b`, `from a import b`,
`from a.b import c`, relative imports, imports inside functions), with the `__init__` of every
package on the way. Functions the registry names as "module:function" strings are not
followed: a kind lists the modules it runs that way.

What is hashed is code, not prose or places:

- each module's syntax tree, without docstrings, bare string statements and comments (which the
  tree never holds), and without line numbers, so fixing a comment or re-wrapping a line
  re-runs nothing;
- modules are found by module name, and each one counts by its content, never by its name or
  path: every import of a project module is replaced by that module's own content digest, and
  a "module:function" string by a placeholder (its kind's `code` covers what it names). Moving
  a module to another package and fixing its imports re-runs nothing; making an import point at
  a different module re-runs its users;
- a module whose tree is empty once its docstring is gone (a package's `__init__`) runs nothing
  and counts for nothing, so adding a package level re-runs nothing.

Changing how drafters are trained then leaves trained targets reusable, while any change to
code a job runs re-runs it. (Cf. Hamilton's `hash_source_code`, which strips docstrings and
comments the same way for its cache keys.)

The tests edit a copy of the source and check the plan: changing the validation verdict's text
re-runs only measure_speedup; changing the drafter re-runs the drafter's jobs and what depends
on them, never train_target; changing the depth choice re-runs select_depth and the validation
that takes its choice.
"""

from __future__ import annotations

import ast
import hashlib
import re
import sys
from collections.abc import Callable
from functools import cache, lru_cache
from importlib import metadata
from pathlib import Path

from pipeline.core.kinds import KINDS
from workers.drafters.registry import FAMILIES

_ROOT = Path(__file__).resolve().parent.parent
_PACKAGES = ("workers", "pipeline", "db")
_LIBRARIES = ("torch", "transformers", "tokenizers")
# a string that may name a project module, with an optional ":attribute" (the registry's form)
_MODULE_STRING = re.compile(r"^(?P<module>[A-Za-z_][\w.]*)(?::(?P<attr>[\w.]+))?$")


def module_file(name: str, root: Path = _ROOT) -> Path | None:
    """The source file of a project module or package ('workers.measure.curves' -> workers/measure/curves.py)."""
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


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module an ImportFrom reads from (relative: `level - 1` packages up)."""
    base = node.module or ""
    if not node.level:
        return base
    parts = (module if is_package else module.rpartition(".")[0]).split(".")
    return ".".join(parts[: len(parts) - (node.level - 1)] + ([base] if base else []))


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _stamp(path: Path) -> tuple[str, int, int]:
    """What says a file is unchanged within one process: its path, modification time and size."""
    st = path.stat()
    return str(path), st.st_mtime_ns, st.st_size


def _imported_names(path: Path, root: Path) -> frozenset[str]:
    """Every module name `path` may import: for `from a import b`, both `a` and `a.b`."""
    return _imported_names_of(_stamp(path), root)


@lru_cache(maxsize=4096)
def _imported_names_of(stamp: tuple[str, int, int], root: Path) -> frozenset[str]:
    path = Path(stamp[0])
    module = _module_name(path, root)
    names: set[str] = set()
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, module, path.name == "__init__.py")
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return frozenset(names)


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


class _Canonical(ast.NodeTransformer):
    """A module's tree as code only: prose dropped, project modules named by `ref(module)`."""

    def __init__(self, module: str, is_package: bool, root: Path, ref: Callable[[str], str]):
        self.module, self.is_package, self.root, self.ref = module, is_package, root, ref

    def _project(self, name: str) -> bool:
        return module_file(name, self.root) is not None

    def visit_Expr(self, node: ast.Expr):
        # a bare string statement (a docstring, or prose between statements) does nothing
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return None
        return self.generic_visit(node)

    def visit_Import(self, node: ast.Import):
        out = []
        for a in node.names:
            if self._project(a.name):  # `import a.b` binds `a`; `import a.b as c` binds `c`
                out.append(ast.Import(names=[ast.alias(self.ref(a.name), a.asname or a.name.split(".")[0])]))
            else:
                out.append(ast.Import(names=[a]))
        return out

    def visit_ImportFrom(self, node: ast.ImportFrom):
        base = _absolute(node, self.module, self.is_package)
        out = []
        for a in node.names:
            bound = a.asname or a.name
            if self._project(f"{base}.{a.name}"):  # `from a import b`, b a module
                out.append(ast.Import(names=[ast.alias(self.ref(f"{base}.{a.name}"), bound)]))
            elif self._project(base):  # `from a import name`, name defined in a
                out.append(ast.ImportFrom(self.ref(base), [ast.alias(a.name, bound)], 0))
            else:
                out.append(ast.ImportFrom(base, [ast.alias(a.name, bound)], 0))
        return out

    def visit_Constant(self, node: ast.Constant):
        # a "module:function" string (the job registry's form) names code the kind lists in its
        # own `code`, which covers that code's content; the name itself is a place, not code
        if (
            isinstance(node.value, str)
            and (m := _MODULE_STRING.match(node.value))
            and "." in m["module"]
            and self._project(m["module"])
        ):
            return ast.Constant("@module" + (f":{m['attr']}" if m["attr"] else ""))
        return node


def _digest(path: Path, root: Path, ref: Callable[[str], str]) -> str | None:
    """sha256 of the module's code with project modules named by `ref`; None when it runs nothing."""
    tree = _Canonical(_module_name(path, root), path.name == "__init__.py", root, ref).visit(_parse(path))
    if not tree.body:
        return None
    return hashlib.sha256(ast.dump(tree, annotate_fields=False).encode()).hexdigest()


def module_digests(paths: list[Path], root: Path = _ROOT) -> dict[Path, str | None]:
    """Each module's content digest: its code, with every project module it names replaced by
    that module's own digest taken with names blanked (so no cycle of imports is followed)."""
    return {p: _module_digest(p, root) for p in paths}


def _module_digest(path: Path, root: Path) -> str | None:
    # the digest depends on the file and on the files it imports: kept while none of them changes
    imported = {module_file(name, root) for name in _imported_names(path, root)} - {None}
    return _module_digest_of(_stamp(path), tuple(sorted(_stamp(f) for f in imported)), root)


@lru_cache(maxsize=4096)
def _module_digest_of(stamp: tuple[str, int, int], imported: tuple, root: Path) -> str | None:
    return _digest(Path(stamp[0]), root, lambda name: _local_digest(_stamp(module_file(name, root)), root))


@lru_cache(maxsize=4096)
def _local_digest(stamp: tuple[str, int, int], root: Path) -> str:
    """A module's digest with the project modules it names blanked; kept while the file is unchanged
    (every kind's version of one plan reads the same modules)."""
    return "@" + (_digest(Path(stamp[0]), root, lambda _: "@") or "empty")


def source_version(modules: tuple[str, ...] | None = None, root: Path = _ROOT) -> str:
    """'<package version>+<12 hex>' over the code `modules` run (a job's, from its kind's
    `code_of(config)`; the whole code base when None) under `root`, and the libraries that
    shape results."""
    if modules is None:
        modules = (
            *(m for k in KINDS.values() for m in k.code),
            *(m for f in FAMILIES.values() for m in (f.trainer_module, f.family_module)),
        )
    digests = module_digests(source_closure(modules, root), root)
    h = hashlib.sha256()
    for d in sorted(d for d in digests.values() if d is not None):
        h.update(d.encode() + b"\0")
    h.update(f"python{sys.version_info[0]}.{sys.version_info[1]}".encode())  # the built-in corpora
    for lib in _LIBRARIES:
        h.update(f"{lib}=={_installed(lib)}".encode())
    return f"{_installed('specfleet')}+{h.hexdigest()[:12]}"


@cache
def code_version(modules: tuple[str, ...] | None = None) -> str:
    """This installation's code version of the source `modules` run (the whole code base when None)."""
    return source_version(modules)


def _installed(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "0+unknown"
