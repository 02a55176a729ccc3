"""Code versions per job kind: each covers exactly the source that kind runs, in every import form."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from support.paths import REPO

from pipeline.core.kinds import KINDS
from pipeline.plan import build_plan
from pipeline.spec import parse_spec
from pipeline.version import code_version, source_closure, source_version

ROOT = REPO


def names(kind: str, family: str = "eagle3") -> set[str]:
    """The files a job of `kind` runs, for a drafter of `family` (its config selects the family's code)."""
    entry = KINDS[kind]
    chosen = entry.config_code(SimpleNamespace(drafter=SimpleNamespace(kind=family))) if entry.config_code else ()
    return {p.relative_to(ROOT).as_posix() for p in source_closure(entry.code + chosen)}


def test_target_training_does_not_depend_on_drafter_code():
    target = names("train_target")
    assert {
        "workers/models/target.py",
        "workers/data/tokenizer.py",
        "workers/data/corpus.py",
        "workers/data/chat.py",
        "workers/models/loading.py",
        "workers/runtime/lr_schedule.py",
    } <= target
    assert (
        not {
            "workers/drafters/eagle3/train.py",
            "workers/drafters/eagle3/model.py",
            "workers/measure/curves.py",
            "workers/decoding/chain.py",
            "workers/drafters/eagle3/family.py",
            "workers/jobs/measure_speedup.py",
        }
        & target
    )


def test_each_kind_covers_what_it_runs_and_not_the_others():
    measure = names("measure_curve")
    assert {
        "workers/measure/curves.py",
        "workers/drafters/eagle3/model.py",
        "workers/measure/diagnostics.py",
        "workers/data/prompts.py",
        "workers/measure/noise.py",
        "workers/drafters/eagle3/family.py",
        "workers/drafters/chain/drafting.py",
        "workers/drafters/registry.py",
        "workers/models/loading.py",
        "pipeline/core/acceptance.py",
        "pipeline/__init__.py",
        "pipeline/core/__init__.py",
    } <= measure
    assert (
        not {
            "workers/drafters/eagle3/train.py",
            "workers/drafters/eagle3/export.py",
            "workers/measure/speedup.py",
            "workers/measure/cost.py",
        }
        & measure
    )
    # a job runs its own drafter family's package, never another's
    assert not any(name.startswith("workers/drafters/standalone/") for name in measure)
    standalone = names("measure_curve", "standalone")
    assert {"workers/drafters/standalone/family.py", "workers/drafters/standalone/chains.py"} <= standalone
    assert not any(name.startswith("workers/drafters/eagle3/") for name in standalone)
    select = names("select_depth")
    assert {"pipeline/core/select.py", "pipeline/core/choice.py", "pipeline/core/schedule.py"} <= select
    assert "pipeline/core/choice.py" not in measure  # the depth choice is not measurement
    assert "workers/drafters/eagle3/model.py" not in select and "pipeline/run/record.py" not in select
    drafter_training = names("train_drafter")
    assert "workers/drafters/eagle3/train.py" in drafter_training
    assert not {"workers/drafters/eagle3/family.py", "workers/decoding/chain.py"} & drafter_training
    assert "pipeline/core/verdict.py" in names("measure_speedup")
    # nothing the driver runs is part of any job
    for kind in KINDS:
        assert not {
            "pipeline/run/executor.py",
            "pipeline/cli/main.py",
            "pipeline/run/record.py",
            "db/store.py",
        } & names(kind)


def test_every_import_form_is_followed(tmp_path):
    """`from pipeline import x`, `import a.b as c`, relative and lazy imports all count."""
    files = {
        "pipeline/__init__.py": "",
        "pipeline/root.py": "from pipeline import direct\nimport pipeline.aliased as al\nfrom . import relative\n"
        "def f():\n    from pipeline.sub.deep import thing\n",
        "pipeline/direct.py": "",
        "pipeline/aliased.py": "",
        "pipeline/relative.py": "",
        "pipeline/sub/__init__.py": "",
        "pipeline/sub/deep.py": "from ..direct import x\n",
        "pipeline/unused.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = {p.relative_to(tmp_path).as_posix() for p in source_closure(("pipeline.root",), tmp_path)}
    assert found == set(files) - {"pipeline/unused.py"}


@pytest.mark.slow
def test_versions_differ_by_kind_and_are_stable():
    versions = {kind: code_version(KINDS[kind].code) for kind in KINDS}
    assert len(set(versions.values())) == len(versions)
    assert versions == {kind: source_version(KINDS[kind].code) for kind in KINDS}


SPEC = {
    "name": "v",
    "targets": [{"name": "t", "builtin": {"layers": 4, "hidden_size": 64, "heads": 4}}],
    "drafters": [{"name": "d", "kind": "eagle3"}],
    "validation": {"num_prompts": 2},
}


@pytest.fixture
def source_copy(tmp_path):
    for package in ("pipeline", "workers", "db"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _rerun_after(root: Path, file: str, old: str, new: str) -> set[str]:
    """The kinds of the jobs whose hash changes when `old` becomes `new` in `file` under `root`."""
    spec = parse_spec(yaml.safe_dump(SPEC))
    before = {
        j.name: (j.kind, j.hash) for j in build_plan(spec, lambda modules=None: source_version(modules, root)).jobs
    }
    path = root / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    after = {j.name: j.hash for j in build_plan(spec, lambda modules=None: source_version(modules, root)).jobs}
    return {kind for name, (kind, h) in before.items() if after[name] != h}


@pytest.mark.slow
def test_editing_the_verdict_text_reruns_only_validation(source_copy):
    changed = _rerun_after(
        source_copy, "pipeline/core/verdict.py", "of the best measured tokens/s", "of the fastest depth's tokens/s"
    )
    assert changed == {"measure_speedup"}


@pytest.mark.slow
def test_editing_the_drafter_reruns_drafter_jobs_never_target_training(source_copy):
    changed = _rerun_after(
        source_copy, "workers/drafters/chain/model.py", "rms_eps: float = 1e-6", "rms_eps: float = 1e-5"
    )
    # the drafter's jobs and everything downstream of them (a job's hash covers its inputs' hashes)
    assert changed == {"train_drafter", "measure_curve", "profile_cost", "select_depth", "measure_speedup"}


@pytest.mark.slow
def test_a_drafter_trains_under_its_own_familys_trainer_only(source_copy):
    spec = {
        **SPEC,
        "drafters": [{"name": "d", "kind": "eagle3"}, {"name": "s", "kind": "standalone", "builtin": {"layers": 1}}],
    }
    parsed = parse_spec(yaml.safe_dump(spec))
    before = _hashes(parsed, source_copy)
    _edit(source_copy / "workers/drafters/eagle3/train.py", "TTT_DECAY = 0.8", "TTT_DECAY = 0.7")  # a changed constant
    after = _hashes(parsed, source_copy)
    changed = {name for name in before if before[name] != after[name]}
    assert "train_drafter t/d" in changed and not any(name.endswith("t/s") for name in changed)
    assert "train_target t" not in changed


@pytest.mark.slow
def test_editing_the_depth_choice_reruns_selection_only(source_copy):
    # a changed expression
    changed = _rerun_after(source_copy, "pipeline/core/choice.py", "if cost_ratio <= 0:", "if cost_ratio < 0:")
    assert changed == {"select_depth", "measure_speedup"}  # validation takes the choice as its input


def _hashes(spec, root: Path) -> dict[str, str]:
    return {j.name: j.hash for j in build_plan(spec, lambda modules=None: source_version(modules, root)).jobs}


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new))


def _sources(root: Path) -> list[Path]:
    return sorted(p for package in ("pipeline", "workers", "db") for p in (root / package).rglob("*.py"))


@pytest.mark.slow
def test_comment_and_docstring_edits_anywhere_change_no_job_hash(source_copy):
    spec = parse_spec(yaml.safe_dump(SPEC))
    before = _hashes(spec, source_copy)
    edited = 0
    for path in _sources(source_copy):
        text = path.read_text()
        tree = ast.parse(text)
        # a module docstring reworded, a comment and blank lines added, every function's docstring reworded
        if ast.get_docstring(tree) is not None and text.startswith('"""'):
            text = '"""Reworded. ' + text[3:]
        for node in ast.walk(tree):
            if (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and ast.get_docstring(node) is not None
            ):
                doc = node.body[0].value
                old = ast.get_source_segment(path.read_text(), doc)
                if old and old.startswith('"""') and text.count(old) == 1:
                    text = text.replace(old, '"""Reworded. ' + old[3:])
        path.write_text("# a comment at the top\n\n" + text + "\n\n# and one at the end\n")
        edited += 1
    assert edited > 100
    assert _hashes(spec, source_copy) == before
    # and the same tree with one real edit does change: the edits above were seen, and ignored
    _edit(source_copy / "workers/drafters/chain/model.py", "rms_eps: float = 1e-6", "rms_eps: float = 2e-6")
    assert _hashes(spec, source_copy) != before


def _move(root: Path, old: str, new: str) -> None:
    """Move module `old` to `new` (dotted names), fixing every import and registry string."""
    old_path, new_path = root / (old.replace(".", "/") + ".py"), root / (new.replace(".", "/") + ".py")
    new_path.parent.mkdir(parents=True, exist_ok=True)
    init = new_path.parent / "__init__.py"
    if not init.exists():
        init.write_text('"""A package level added by the move: a docstring, no code."""\n')
    old_path.rename(new_path)
    old_pkg, _, old_leaf = old.rpartition(".")
    new_pkg, _, new_leaf = new.rpartition(".")
    for path in _sources(root):
        text = path.read_text()
        fixed = text.replace(f"from {old_pkg} import {old_leaf}\n", f"from {new_pkg} import {new_leaf}\n")
        fixed = fixed.replace(f"{old} ", f"{new} ").replace(f"{old}:", f"{new}:").replace(f'"{old}"', f'"{new}"')
        if fixed != text:
            path.write_text(fixed)


_PLAN_IN = """
import json, sys, yaml
from pipeline.plan import build_plan
from pipeline.spec import parse_spec
from pipeline.version import source_version
plan = build_plan(parse_spec(sys.stdin.read()), source_version)
print(json.dumps({j.name: j.hash for j in plan.jobs}))
"""


def _hashes_imported_from(root: Path) -> dict[str, str]:
    """The plan's job hashes with the code base under `root` imported fresh (its own job registry)."""
    out = subprocess.run(
        [sys.executable, "-c", _PLAN_IN],
        cwd=root,
        input=yaml.safe_dump(SPEC),
        text=True,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        check=True,
    )
    return json.loads(out.stdout)


@pytest.mark.slow
def test_moving_a_module_changes_no_job_hash(source_copy):
    before = _hashes_imported_from(source_copy)
    _move(source_copy, "workers.models.rope", "workers.attention.rope")  # imported by the drafter and its trainer
    # named by the job registry both as a code module and as "module:function"
    _move(source_copy, "workers.jobs.measure_speedup", "workers.jobs.validation.measure_speedup")
    assert "workers.jobs.validation.measure_speedup:run" in (source_copy / "pipeline/core/kinds.py").read_text()
    assert not (source_copy / "workers/models/rope.py").exists()
    after = _hashes_imported_from(source_copy)
    assert after == before
    # the moved code is what is hashed: editing it at its new place re-runs its jobs
    _edit(source_copy / "workers/attention/rope.py", "SCALINGS = (", "SCALINGS = ('none', ")
    edited = _hashes_imported_from(source_copy)
    assert edited["train_target t"] == before["train_target t"]
    assert edited["train_drafter t/d"] != before["train_drafter t/d"]


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_an_import_pointed_at_another_module_changes_the_version(tmp_path):
    _tree(
        tmp_path,
        {
            "pipeline/__init__.py": '"""docs only"""\n',
            "pipeline/a.py": "from pipeline.b import K\nX = K + 1\n",
            "pipeline/b.py": "K = 1\n",
            "pipeline/c.py": "K = 2\n",
        },
    )
    both = ("pipeline.a", "pipeline.b", "pipeline.c")  # b and c are in the closure either way
    before = source_version(both, tmp_path)
    (tmp_path / "pipeline/a.py").write_text("from pipeline.c import K\nX = K + 1\n")
    assert source_version(both, tmp_path) != before


def test_an_empty_package_level_counts_for_nothing_and_code_in_one_does(tmp_path):
    _tree(tmp_path, {"pipeline/__init__.py": "", "pipeline/a.py": "X = 1\n"})
    flat = source_version(("pipeline.a",), tmp_path)
    _tree(tmp_path, {"pipeline/sub/__init__.py": '"""A new level: prose only."""\n', "pipeline/sub/a.py": "X = 1\n"})
    (tmp_path / "pipeline/a.py").unlink()
    assert source_version(("pipeline.sub.a",), tmp_path) == flat
    (tmp_path / "pipeline/sub/__init__.py").write_text("import os\n")  # an __init__ that runs something
    assert source_version(("pipeline.sub.a",), tmp_path) != flat
