"""The spec's `serving:` section: the engine's environment is checked and its release read when the
spec is read; the release is part of each serve_check job's identity, the environment's path is not."""

from __future__ import annotations

import pytest
import yaml
from support.vllm import fake_vllm_python

from pipeline.core.kinds import KINDS
from pipeline.errors import SpecError
from pipeline.plan import build_plan
from pipeline.spec import parse_spec

BASE = {
    "name": "s",
    "targets": [{"name": "t", "builtin": {"layers": 4, "hidden_size": 64, "heads": 2}}],
    "drafters": [{"name": "pre", "kind": "eagle3", "norm": "pre", "train": {"ttt_depth": 2}}],
    "evaluation": {"max_depth": 3},
}


def spec_with(serving, **changes):
    return parse_spec(yaml.safe_dump({**BASE, "serving": serving, **changes}), "s.yaml")


def errors_of(serving, **changes) -> list[str]:
    with pytest.raises(SpecError) as info:
        spec_with(serving, **changes)
    return info.value.messages


def test_the_release_is_read_and_the_path_made_absolute(tmp_path, monkeypatch):
    python = fake_vllm_python(tmp_path, "0.32.0")
    spec = spec_with({"python": python})
    assert (spec.serving.python, spec.serving.version, spec.serving.engine) == (python, "0.32.0", "vllm")
    monkeypatch.chdir(tmp_path)
    relative = spec_with({"python": "fake-vllm-0.32.0/bin/python"})
    assert relative.serving.python == python
    monkeypatch.setenv("SPECFLEET_VLLM_PYTHON", python)
    assert spec_with({}).serving.python == python  # the environment's default


def test_serve_check_jobs_follow_the_release_not_the_path(tmp_path):
    one = build_plan(spec_with({"python": fake_vllm_python(tmp_path / "a", "0.32.0")}), "v1")
    moved = build_plan(spec_with({"python": fake_vllm_python(tmp_path / "b", "0.32.0")}), "v1")
    newer = build_plan(spec_with({"python": fake_vllm_python(tmp_path, "0.33.0")}), "v1")
    plain = build_plan(parse_spec(yaml.safe_dump(BASE)), "v1")
    hashes = [{j.name: j.hash for j in plan.jobs} for plan in (one, moved, newer, plain)]
    assert hashes[0] == hashes[1]
    changed = {name for name in hashes[0] if hashes[0][name] != hashes[2][name]}
    assert changed == {"serve_check t/pre"}
    assert set(hashes[0]) - set(hashes[3]) == {"serve_check t/pre"}
    (job,) = [j for j in one.jobs if j.kind == "serve_check"]
    by_hash = one.by_hash()
    assert {name: by_hash[h].kind for name, h in job.deps} == {
        "target": "train_target",
        "drafter": "train_drafter",
        "curve": "measure_curve",
        "cost": "profile_cost",
        "depth": "select_depth",
    }
    assert set(dict(job.deps)) <= set(KINDS["serve_check"].inputs)
    assert job.config.validation.num_prompts == 8  # without a validation section, its defaults
    assert job.num_cpus == 1 and job.config.num_cpus == 1  # placed as profile_cost is by default


def test_refusals_name_the_field(tmp_path):
    missing = tmp_path / "nowhere" / "python"
    (problem,) = errors_of({"python": str(missing)})
    assert problem.startswith(f"serving: python: vLLM python {missing} does not exist") and "make vllm" in problem
    no_vllm = tmp_path / "bin" / "python"
    no_vllm.parent.mkdir()
    no_vllm.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'vllm'\" >&2\nexit 1\n")
    no_vllm.chmod(0o755)
    (problem,) = errors_of({"python": str(no_vllm)})
    assert problem.startswith("serving: python: vLLM failed: ModuleNotFoundError: No module named 'vllm'")
    python = fake_vllm_python(tmp_path)
    assert any(
        p.startswith("serving.version: specfleet reads this from the engine's environment")
        for p in errors_of({"python": python, "version": "0.32.0"})
    )
    (problem,) = errors_of({"python": python}, evaluation={"max_depth": 3, "temperatures": [1.0, 0.0]})
    assert problem.startswith("serving: the serving check decodes greedily") and "list 0 first" in problem
    assert errors_of({"python": python, "engine": "sglang"})[0].startswith("serving.engine:")
    assert errors_of({"python": python, "tolerance": 1.5})[0].startswith("serving.tolerance:")
    assert errors_of({"python": python, "repeats": 0})[0].startswith("serving.repeats:")
    (problem,) = errors_of({"python": python}, resources={"serve_check": {"num_cpus": 2}})
    assert problem.startswith("resources.serve_check: give it what profile_cost has")


def test_costs_timed_by_vllm_replace_profile_cost_with_engine_cost(tmp_path):
    python = fake_vllm_python(tmp_path)
    timed = {"timed_by": "vllm", "batch_sizes": [1, 4]}
    plan = build_plan(spec_with({"python": python}, cost=timed), "v1")
    kinds = {j.name: j.kind for j in plan.jobs}
    assert "engine_cost t/pre" in kinds and "profile_cost t/pre" not in kinds
    by_hash = plan.by_hash()
    for kind in ("select_depth", "serve_check"):
        (job,) = [j for j in plan.jobs if j.kind == kind]
        assert by_hash[dict(job.deps)["cost"]].kind == "engine_cost"
    (engine,) = [j for j in plan.jobs if j.kind == "engine_cost"]
    assert engine.config.cost.batch_sizes == [1, 4] and engine.config.serving.version == "0.32.0"
    assert set(dict(engine.deps)) == {"target", "drafter"}
    # the default keeps specfleet's own clock
    assert "profile_cost t/pre" in {j.name for j in build_plan(spec_with({"python": python}), "v1").jobs}


def test_costs_timed_by_vllm_need_a_serving_engine_placed_as_the_others(tmp_path):
    with pytest.raises(SpecError) as info:
        parse_spec(yaml.safe_dump({**BASE, "cost": {"timed_by": "vllm"}}), "s.yaml")
    assert info.value.messages == [
        "cost.timed_by: vllm times costs in the engine a `serving:` section names; add one (line 2)"
    ]
    python = fake_vllm_python(tmp_path)
    resources = {"profile_cost": {"num_cpus": 2}, "serve_check": {"num_cpus": 2}, "engine_cost": {"num_cpus": 1}}
    (problem,) = errors_of({"python": python}, cost={"timed_by": "vllm"}, resources=resources)
    assert problem.startswith("resources.engine_cost: give it what profile_cost has")
    with pytest.raises(SpecError):
        spec_with({"python": python}, cost={"timed_by": "hf"})
    (problem,) = errors_of({"python": python}, cost={"timed_by": "vllm", "cost_ratio": 0.1})
    assert problem.startswith("cost.cost_ratio: a given ratio replaces timed costs")


@pytest.mark.parametrize("spelling", ["vLLM", "VLLM", "v-llm"])
def test_the_engine_is_read_as_users_spell_it(tmp_path, spelling):
    python = fake_vllm_python(tmp_path)
    assert spec_with({"python": python, "engine": spelling}).serving.engine == "vllm"
    plain = build_plan(spec_with({"python": python}), "v1")
    spelled = build_plan(spec_with({"python": python, "engine": spelling}), "v1")
    assert [j.hash for j in spelled.jobs] == [j.hash for j in plain.jobs]  # the same jobs, nothing re-run
