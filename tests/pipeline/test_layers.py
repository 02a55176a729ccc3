"""The layers hold: the core imports no heavy library, workers import nothing of the driver."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest
from support.paths import REPO

from pipeline.core.kinds import KINDS

DRIVER = ("ray", "mlflow", "sqlalchemy", "alembic", "typer", "rich", "matplotlib")


def loaded_after(*modules: str) -> set[str]:
    """Top-level packages loaded by importing `modules` in a fresh interpreter."""
    code = (
        "import json, sys\n"
        + "".join(f"import {m}\n" for m in modules)
        + "print(json.dumps(sorted({n.split('.')[0] for n in sys.modules})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


def _modules_of(package: str) -> list[str]:
    root = REPO / package.replace(".", "/")
    return sorted(
        ".".join(f.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__") for f in root.rglob("*.py")
    )


@pytest.mark.parametrize("package", ["pipeline.report", "pipeline.bench", "pipeline.autotune"])
def test_reports_benchmarks_and_autotune_import_neither_ray_nor_torch(package):
    """What reads results (reports), measures specfleet (benchmarks) or writes engine settings
    (autotune) loads no Ray and no torch when imported: those come only inside the functions that
    start a run or load a drafter."""
    modules = _modules_of(package)
    assert len(modules) > 3  # every module of the package, not an empty list
    assert not loaded_after(*modules) & {"ray", "torch", "transformers"}


def test_the_core_imports_neither_torch_nor_the_driver():
    loaded = loaded_after("pipeline.core.kinds", "pipeline.core.choice", "pipeline.core.select", "pipeline.core.files")
    assert not loaded & {"torch", "transformers", *DRIVER}


FORKED = """
import json, os, sys
import torch, transformers  # what every job needs, imported once: each kind is forked from here
import workers.jobs.run
base = sorted({n.split('.')[0] for n in sys.modules})
print(json.dumps({"": base}), flush=True)
for kind, module in json.loads(sys.argv[1]).items():
    read, write = os.pipe()
    if os.fork() == 0:
        os.close(read)
        __import__(module)
        os.write(write, json.dumps(sorted({n.split('.')[0] for n in sys.modules})).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        loaded = json.loads(pipe.read())
    os.wait()
    print(json.dumps({kind: loaded}), flush=True)
"""


@pytest.fixture(scope="module")
def loaded_by_kind() -> dict[str, set[str]]:
    """What each kind's job module loads: torch, transformers and the job runner imported once in a
    fresh interpreter that loads none of the driver, then each kind's module in a fork of it."""
    modules = {kind: KINDS[kind].run.partition(":")[0] for kind in sorted(KINDS)}
    done = subprocess.run(
        [sys.executable, "-c", FORKED, json.dumps(modules)], capture_output=True, text=True, timeout=300, check=True
    )
    out = {}
    for line in done.stdout.splitlines():
        out.update({kind: set(names) for kind, names in json.loads(line).items()})
    assert "torch" in out[""] and not out.pop("") & set(DRIVER)  # the common part loads none of the driver
    return out


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.slow
def test_a_workers_job_imports_nothing_of_the_driver(kind, loaded_by_kind):
    assert "workers" in loaded_by_kind[kind]  # it did import its job
    assert not loaded_by_kind[kind] & set(DRIVER)


def test_every_registry_entry_names_functions_that_exist():
    from pipeline.core.kinds import resolve

    for kind in KINDS.values():
        assert callable(resolve(kind.record)) and callable(resolve(kind.run))
        assert kind.run.partition(":")[0] in kind.code  # its code version starts where it runs


def test_every_drafter_family_has_a_trainer_and_a_family_object():
    from pipeline.core.model_settings import DRAFTER_KINDS
    from workers.drafters.registry import FAMILIES, family_of, trainer_of

    assert set(DRAFTER_KINDS) == set(FAMILIES)
    assert all(callable(trainer_of(name)) for name in FAMILIES)
    assert {family_of(name).name for name in FAMILIES} == set(FAMILIES)


def test_package_init_files_hold_only_their_docstring():
    """Importing a package runs nothing: its __init__ says what the package is, and no more."""
    inits = [f for package in ("pipeline", "workers", "db") for f in (REPO / package).rglob("__init__.py")]
    assert len(inits) > 15
    for init in inits:
        body = ast.parse(init.read_text()).body
        assert ast.get_docstring(ast.Module(body=body, type_ignores=[])), f"{init} has no docstring"
        assert len(body) == 1, f"{init.relative_to(REPO)} runs code: {ast.dump(body[1])[:80]}"
