"""Code versions per job kind: each covers the source that kind runs, and no more."""
from __future__ import annotations

from pipeline.version import KIND_ROOTS, code_version, source_closure


def names(kind: str) -> set[str]:
    return {p.name for p in source_closure(KIND_ROOTS[kind])}


def test_target_training_does_not_depend_on_drafter_code():
    target = names("train_target")
    assert {"target.py", "tokenizer.py", "corpus.py", "chat.py"} <= target
    assert not {"train_drafter.py", "drafter.py", "measure.py", "engine.py"} & target


def test_measurement_covers_what_it_runs():
    assert {"measure.py", "drafter.py", "diagnostics.py", "prompts.py", "noise.py", "acceptance.py"} <= names(
        "measure_curve")
    assert names("select_depth") >= {"acceptance.py"} and "drafter.py" not in names("select_depth")


def test_versions_differ_by_kind_and_are_stable():
    versions = {kind: code_version(kind) for kind in KIND_ROOTS}
    assert len(set(versions.values())) == len(versions)
    assert versions == {kind: code_version(kind) for kind in KIND_ROOTS}
