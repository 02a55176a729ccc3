"""Hostile specs (tests/support/hostile_specs.py) and fuzzed ones: refused with lines naming the field or
file, never a traceback, and nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.hostile_specs import BASE, HOSTILE

from pipeline.errors import SpecError
from pipeline.spec import ExperimentSpec, load_spec, parse_spec


def _write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "hostile.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_the_corpus_is_large_enough():
    assert len(HOSTILE) >= 50 and len({name for name, _, _ in HOSTILE}) == len(HOSTILE)


@pytest.mark.parametrize("name,text,message", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_spec_is_refused_naming_what_is_wrong(tmp_path, name, text, message):
    with pytest.raises(SpecError) as caught:
        load_spec(_write(tmp_path, text))
    assert any(message in m for m in caught.value.messages), caught.value.messages
    assert all("\n" not in m and len(m) < 2000 for m in caught.value.messages)


SAMPLE = [
    "not utf-8",
    "deep nesting",
    "billion laughs",
    "seed 400 digits",
    "infinite cost ratio",
    "steps 10^9",
    "noise level a list",
    "pairing target a list",
]


@pytest.mark.parametrize("name", SAMPLE)
def test_specfleet_run_refuses_before_anything_is_written(tmp_path, name):
    text = next(t for n, t, _ in HOSTILE if n == name)
    path = _write(tmp_path, text)
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(path), "--workdir", str(tmp_path / "work")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-1500:]
    assert not (tmp_path / "work").exists()  # no database, no MLflow store, no checkpoint folder


# -- fuzzing -------------------------------------------------------------------------------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=12,
)
KEYS = [
    "name",
    "seed",
    "targets",
    "drafters",
    "pairings",
    "evaluation",
    "cost",
    "validation",
    "training_data",
    "resources",
]
PATHS = [
    ("evaluation", "max_depth"),
    ("evaluation", "temperatures"),
    ("evaluation", "conditions"),
    ("evaluation", "prompts"),
    ("cost", "batch_sizes"),
    ("cost", "cost_ratio"),
    ("targets", 0, "builtin"),
    ("targets", 0, "name"),
    ("drafters", 0, "train"),
    ("drafters", 0, "kind"),
    ("resources", "measure_curve"),
    ("pairings", 0, "target"),
    ("training_data", "tokens"),
]


def _set(data: dict, path: tuple, value) -> dict:
    node = data
    for key in path[:-1]:
        if isinstance(key, int):
            if not isinstance(node, list) or not node:
                return data
            node = node[key]
        else:
            node = node.setdefault(key, [{}] if key in ("targets", "drafters", "pairings") else {})
        if not isinstance(node, (dict, list)):
            return data
    if isinstance(node, dict):
        node[path[-1]] = value
    return data


def _outcome(text: str) -> None:
    """The loader either returns a spec or raises SpecError with one-line messages; nothing else."""
    try:
        spec = parse_spec(text)
    except SpecError as exc:
        assert exc.messages and all(isinstance(m, str) and "\n" not in m for m in exc.messages)
        return
    assert isinstance(spec, ExperimentSpec)


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.sampled_from(PATHS), VALUES)
def test_fuzzed_values_at_known_places(path, value):
    data = yaml.safe_load(yaml.safe_dump(BASE))
    _outcome(yaml.safe_dump(_set(data, path, value), allow_unicode=True))


@FUZZ
@given(st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=6))
def test_fuzzed_top_level_mappings(data):
    _outcome(yaml.safe_dump(data, allow_unicode=True))


@FUZZ
@given(st.text(alphabet=st.sampled_from(list("name: -[]{}&*!|>'\"#\n\t 0123456789.e+targets_drafters")), max_size=200))
def test_fuzzed_yaml_text(text):
    _outcome(text)
