"""Code versions per job kind: each covers exactly the source that kind runs, in every import form."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from pipeline.core.kinds import KINDS
from pipeline.plan import build_plan
from pipeline.spec import parse_spec
from pipeline.version import code_version, source_closure, source_version

ROOT = Path(__file__).resolve().parent.parent


def names(kind: str) -> set[str]:
    return {p.relative_to(ROOT).as_posix() for p in source_closure(KINDS[kind].code)}


def test_target_training_does_not_depend_on_drafter_code():
    target = names("train_target")
    assert {"workers/target.py", "workers/tokenizer.py", "workers/corpus.py", "workers/chat.py",
            "workers/models.py", "workers/lr_schedule.py"} <= target
    assert not {"workers/eagle_train.py", "workers/drafter.py", "workers/measure.py", "workers/engine.py",
                "workers/family.py", "workers/jobs/measure_speedup.py"} & target


def test_each_kind_covers_what_it_runs_and_not_the_others():
    measure = names("measure_curve")
    assert {"workers/measure.py", "workers/drafter.py", "workers/diagnostics.py", "workers/prompts.py",
            "workers/noise.py", "workers/family.py", "workers/chains.py", "workers/models.py",
            "pipeline/core/acceptance.py", "pipeline/__init__.py", "pipeline/core/__init__.py"} <= measure
    assert not {"workers/eagle_train.py", "workers/export.py", "workers/speedup.py", "workers/cost.py"} & measure
    select = names("select_depth")
    assert {"pipeline/core/select.py", "pipeline/core/choice.py", "pipeline/core/schedule.py"} <= select
    assert "pipeline/core/choice.py" not in measure  # the depth choice is not measurement
    assert "workers/drafter.py" not in select and "pipeline/record.py" not in select
    drafter_training = names("train_drafter")
    assert not {"workers/family.py", "workers/engine.py", "workers/eagle_train.py"} & drafter_training
    # nothing the driver runs is part of any job
    for kind in KINDS:
        assert not {"pipeline/executor.py", "pipeline/cli.py", "pipeline/record.py", "db/store.py"} & names(kind)


def test_every_import_form_is_followed(tmp_path):
    """`from pipeline import x`, `import a.b as c`, relative and lazy imports all count."""
    files = {
        "pipeline/__init__.py": "",
        "pipeline/root.py": "from pipeline import direct\nimport pipeline.aliased as al\nfrom . import relative\n"
                            "def f():\n    from pipeline.sub.deep import thing\n",
        "pipeline/direct.py": "", "pipeline/aliased.py": "", "pipeline/relative.py": "",
        "pipeline/sub/__init__.py": "", "pipeline/sub/deep.py": "from ..direct import x\n",
        "pipeline/unused.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = {p.relative_to(tmp_path).as_posix() for p in source_closure(("pipeline.root",), tmp_path)}
    assert found == set(files) - {"pipeline/unused.py"}


def test_versions_differ_by_kind_and_are_stable():
    versions = {kind: code_version(KINDS[kind].code) for kind in KINDS}
    assert len(set(versions.values())) == len(versions)
    assert versions == {kind: source_version(KINDS[kind].code) for kind in KINDS}


SPEC = {
    "name": "v", "targets": [{"name": "t", "builtin": {"layers": 4, "hidden_size": 64, "heads": 4}}],
    "drafters": [{"name": "d", "kind": "eagle3"}], "validation": {"num_prompts": 2},
}


@pytest.fixture
def source_copy(tmp_path):
    for package in ("pipeline", "workers", "db"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _rerun_after(root: Path, file: str, old: str, new: str) -> set[str]:
    """The kinds of the jobs whose hash changes when `old` becomes `new` in `file` under `root`."""
    spec = parse_spec(yaml.safe_dump(SPEC))
    before = {j.name: (j.kind, j.hash) for j in build_plan(spec, lambda modules=None: source_version(modules, root)).jobs}
    path = root / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    after = {j.name: j.hash for j in build_plan(spec, lambda modules=None: source_version(modules, root)).jobs}
    return {kind for name, (kind, h) in before.items() if after[name] != h}


def test_editing_the_verdict_text_reruns_only_validation(source_copy):
    changed = _rerun_after(source_copy, "workers/jobs/measure_speedup.py",
                           "of the best measured tokens/s", "of the fastest depth's tokens/s")
    assert changed == {"measure_speedup"}


def test_editing_the_drafter_reruns_drafter_jobs_never_target_training(source_copy):
    changed = _rerun_after(source_copy, "workers/drafter.py", "class Eagle3Drafter(nn.Module):",
                           "class Eagle3Drafter(nn.Module):  # edited")
    # the drafter's jobs and everything downstream of them (a job's hash covers its inputs' hashes)
    assert changed == {"train_drafter", "measure_curve", "profile_cost", "select_depth", "measure_speedup"}
    assert "train_target" not in changed


def test_a_drafter_trains_under_its_own_familys_trainer_only(source_copy):
    spec = {**SPEC, "drafters": [{"name": "d", "kind": "eagle3"},
                                 {"name": "s", "kind": "standalone", "builtin": {"layers": 1}}]}
    parsed = parse_spec(yaml.safe_dump(spec))
    version = lambda modules=None: source_version(modules, source_copy)  # noqa: E731
    before = {j.name: j.hash for j in build_plan(parsed, version).jobs}
    path = source_copy / "workers/eagle_train.py"
    path.write_text(path.read_text() + "\n# edited\n")
    after = {j.name: j.hash for j in build_plan(parsed, version).jobs}
    changed = {name for name in before if before[name] != after[name]}
    assert "train_drafter t/d" in changed and not any(name.endswith("t/s") for name in changed)
    assert "train_target t" not in changed


def test_editing_the_depth_choice_reruns_selection_only(source_copy):
    changed = _rerun_after(source_copy, "pipeline/core/choice.py", "def choose_depth(",
                           "# edited\ndef choose_depth(")
    assert changed == {"select_depth", "measure_speedup"}  # validation takes the choice as its input
