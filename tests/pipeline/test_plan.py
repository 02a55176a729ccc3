"""Planning: the job graph and content hashes (stable when nothing changed, sensitive otherwise)."""

from __future__ import annotations

import pytest
import yaml

from pipeline.errors import SpecError
from pipeline.plan import build_plan
from pipeline.spec import parse_spec

BASE = {
    "name": "p",
    "seed": 3,
    "targets": [{"name": "t", "builtin": {"layers": 4, "hidden_size": 64, "heads": 4}}],
    "drafters": [
        {"name": "pre", "kind": "eagle3", "norm": "pre", "train": {"ttt_depth": 2, "lr": 0.003}},
        {"name": "post", "kind": "eagle3", "norm": "post", "train": {"ttt_depth": 2, "lr": 0.003}},
    ],
    "evaluation": {"max_depth": 4},
}


def plan_of(data: dict, code: str = "v1"):
    return build_plan(parse_spec(yaml.safe_dump(data)), code)


def hashes(plan) -> dict[str, str]:
    return {j.name: j.hash for j in plan.jobs}


def modified(path: list, value) -> dict:
    data = yaml.safe_load(yaml.safe_dump(BASE))
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


def test_graph_shape_and_order():
    plan = plan_of(BASE)
    kinds = [j.kind for j in plan.jobs]
    assert kinds.count("train_target") == 1
    assert kinds.count("train_drafter") == kinds.count("measure_curve") == kinds.count("select_depth") == 2
    seen = set()
    for job in plan.jobs:  # dependencies always come first
        assert all(h in seen for _, h in job.deps), job.name
        seen.add(job.hash)
    select = next(j for j in plan.jobs if j.kind == "select_depth")
    dep_kinds = {plan.by_hash()[h].kind for _, h in select.deps}
    assert dep_kinds == {"measure_curve", "profile_cost"}
    assert select.config.draft_sampling == "sampled"  # the evaluation's drafting rule travels with the choice


def test_hashes_are_stable():
    a = hashes(plan_of(BASE))
    reordered = dict(reversed(list(BASE.items())))  # key order in the YAML does not matter
    assert hashes(plan_of(reordered)) == a
    assert hashes(plan_of(BASE)) == a
    assert len(set(a.values())) == len(a)


def test_drafter_change_reruns_only_that_drafter_and_downstream():
    a = hashes(plan_of(BASE))
    b = hashes(plan_of(modified(["drafters", 0, "train", "lr"], 0.001)))
    changed = {name for name in a if a[name] != b[name]}
    assert changed == {"train_drafter t/pre", "measure_curve t/pre", "profile_cost t/pre", "select_depth t/pre"}


def test_evaluation_change_keeps_training():
    a = hashes(plan_of(BASE))
    b = hashes(plan_of(modified(["evaluation", "max_depth"], 6)))
    changed = {name.split()[0] for name in a if a[name] != b[name]}
    assert changed == {"measure_curve", "profile_cost", "select_depth"}


def test_target_and_seed_and_code_changes_rerun_everything():
    a = hashes(plan_of(BASE))
    for variant in (
        plan_of(modified(["targets", 0, "builtin", "hidden_size"], 128)),
        plan_of(modified(["seed"], 4)),
        plan_of(BASE, code="v2"),
    ):
        b = hashes(variant)
        assert all(a[n] != b[n] for n in a)


def test_cost_ratio_override_touches_only_selection():
    a = hashes(plan_of(BASE))
    b = hashes(plan_of(modified(["cost"], {"cost_ratio": 0.2})))
    assert {n.split()[0] for n in a if a[n] != b[n]} == {"select_depth"}


def test_resources_change_hashes_only_where_they_change_results():
    a = hashes(plan_of(BASE))
    more_cpus = hashes(plan_of(modified(["resources"], {"train_drafter": {"num_cpus": 2, "num_gpus": 0}})))
    assert more_cpus == a  # the same computation on the same kind of device
    on_gpu = hashes(plan_of(modified(["resources"], {"train_drafter": {"num_cpus": 1, "num_gpus": 1}})))
    assert {n.split()[0] for n in a if a[n] != on_gpu[n]} == {
        "train_drafter",
        "measure_curve",
        "profile_cost",
        "select_depth",
    }
    timing = hashes(plan_of(modified(["resources"], {"profile_cost": {"num_cpus": 2, "num_gpus": 0}})))
    assert {n.split()[0] for n in a if a[n] != timing[n]} == {"profile_cost", "select_depth"}


def test_standalone_drafters_in_the_plan():
    data = yaml.safe_load(yaml.safe_dump(BASE))
    data["drafters"] = [
        {"name": "small", "kind": "standalone", "builtin": {"layers": 1, "hidden_size": 32, "heads": 2}},
        {"name": "hub", "kind": "standalone", "hf": "someorg/tiny-draft"},
    ]
    plan = plan_of(data)
    names = [j.name for j in plan.jobs]
    assert "train_drafter t/small" in names and "train_drafter t/hub" not in names  # an hf model is used as is
    hub_measure = next(j for j in plan.jobs if j.name == "measure_curve t/hub")
    assert hub_measure.config.drafter.hf == "someorg/tiny-draft"
    assert hub_measure.config.drafter.kind == "standalone"
    assert {n for n, _ in hub_measure.deps} == {"target"}
    small_measure = next(j for j in plan.jobs if j.name == "measure_curve t/small")
    assert {n for n, _ in small_measure.deps} == {"target", "drafter"}


def test_every_job_carries_its_kinds_typed_config(tmp_path):
    from support.vllm import fake_vllm_python

    from pipeline.core.kinds import KINDS

    data = modified(["validation"], {"num_prompts": 4})
    data["drafters"][1]["train"]["corpus"] = "regenerated"
    data["drafters"][1]["distill"] = {"method": "imitation", "rounds": 1}
    data["serving"] = {"python": fake_vllm_python(tmp_path)}
    plan = plan_of(data)
    engine_timed = plan_of({**data, "cost": {**data.get("cost", {}), "timed_by": "vllm"}})
    assert {j.kind for j in plan.jobs} == set(KINDS) - {"engine_cost"}  # costs timed by specfleet
    assert {j.kind for j in engine_timed.jobs} == set(KINDS) - {"profile_cost"}  # by the serving engine
    for job in plan.jobs + engine_timed.jobs:
        assert type(job.config) is KINDS[job.kind].config
        assert {name for name, _ in job.deps} <= set(KINDS[job.kind].inputs)


def test_renaming_a_drafter_keeps_its_training_and_cost_profile():
    renamed = modified(["drafters"], [{**BASE["drafters"][0], "name": "pre2"}, BASE["drafters"][1]])
    before, after = hashes(plan_of(BASE)), hashes(plan_of(renamed))
    assert after["train_drafter t/pre2"] == before["train_drafter t/pre"]
    assert after["profile_cost t/pre2"] == before["profile_cost t/pre"]
    assert after["measure_curve t/pre2"] != before["measure_curve t/pre"]  # its rows are stored under the name


def test_validation_adds_an_engine_benchmark_after_each_depth_choice():
    assert "measure_speedup" not in {j.kind for j in plan_of(BASE).jobs}
    plan = plan_of(modified(["validation"], {"num_prompts": 4, "new_tokens": 32}))
    jobs = plan.by_hash()
    benches = [j for j in plan.jobs if j.kind == "measure_speedup"]
    assert len(benches) == 2
    for bench in benches:
        deps = {name: jobs[h] for name, h in bench.deps}
        assert {n: d.kind for n, d in deps.items()} == {
            "target": "train_target",
            "drafter": "train_drafter",
            "depth": "select_depth",
        }
        assert deps["depth"].drafter == bench.drafter and bench.config.validation.new_tokens == 32
        assert bench.config.num_cpus == 1  # timings depend on the threads the job had
    # the rest of the plan is untouched by validation; a validation change reruns only the benchmarks
    base = hashes(plan_of(BASE))
    assert {n: h for n, h in hashes(plan).items() if not n.startswith("measure_speedup")} == base
    other = hashes(plan_of(modified(["validation"], {"num_prompts": 5, "new_tokens": 32})))
    assert {n.split()[0] for n in other if other[n] != hashes(plan)[n]} == {"measure_speedup"}


def test_validation_fields_are_checked():
    import pytest

    from pipeline.errors import SpecError

    with pytest.raises(SpecError) as info:
        plan_of(modified(["validation"], {"num_prompts": 0, "tolerance": 1.5, "bogus": 1}))
    text = "\n".join(info.value.messages)
    assert "validation.num_prompts" in text and "validation.tolerance" in text and "validation.bogus" in text


def test_validation_of_a_noise_condition_is_refused():
    import pytest

    from pipeline.errors import SpecError

    data = modified(["evaluation"], {"max_depth": 4, "conditions": [{"noise": "hidden", "a": 0.5}, "default"]})
    data["validation"] = {}
    with pytest.raises(SpecError) as info:
        plan_of(data)
    assert any(m.startswith("validation: the engine drafts without noise") for m in info.value.messages)
    data["evaluation"]["conditions"].reverse()  # the depth is chosen for the first condition: fine now
    assert any(j.kind == "measure_speedup" for j in plan_of(data).jobs)


def test_validation_needs_the_engine_timed_where_the_costs_were():
    import pytest

    from pipeline.errors import SpecError

    data = modified(["validation"], {})
    data["resources"] = {"profile_cost": {"num_cpus": 2}, "measure_speedup": {"num_cpus": 1}}
    with pytest.raises(SpecError) as info:
        plan_of(data)
    assert any(m.startswith("resources.measure_speedup: give it what profile_cost has") for m in info.value.messages)
    data["resources"]["measure_speedup"]["num_cpus"] = 2
    assert sum(j.kind == "measure_speedup" for j in plan_of(data).jobs) == 2


def test_drafters_on_regenerated_text_share_one_text_and_one_pass_of_the_target():
    data = yaml.safe_load(yaml.safe_dump(BASE))
    for d in data["drafters"]:
        d["train"]["corpus"] = "regenerated"
    data["drafters"].append({"name": "deep", "norm": "pre", "train": {"ttt_depth": 4, "corpus": "regenerated"}})
    data["drafters"].append({"name": "last", "fusion": "last", "train": {"corpus": "regenerated"}})
    data["drafters"].append({"name": "small", "kind": "standalone", "builtin": {"train": {"corpus": "regenerated"}}})
    data["drafters"].append({"name": "plain", "train": {"corpus": "stdlib"}})
    data["drafters"].append({"name": "head", "kind": "mtp", "train": {"corpus": "regenerated"}})
    data["drafters"].append({"name": "block", "kind": "dflash", "layers": 2, "train": {"corpus": "regenerated"}})
    plan = plan_of(data)
    jobs = plan.by_hash()
    by_kind = lambda k: [j for j in plan.jobs if j.kind == k]  # noqa: E731
    (text,) = by_kind("regenerate")
    (features,) = by_kind("target_features")  # every layer they read, in one pass of the target
    assert {r.fusion for r in features.config.rules} == {"last", "spread2", "tri"}  # spread2: DFlash's
    trains = {j.drafter: dict(j.deps) for j in by_kind("train_drafter")}
    assert {d for d, deps in trains.items() if deps.get("data") == text.hash} == {
        "pre",
        "post",
        "deep",
        "last",
        "small",
        "head",
        "block",
    }
    assert {deps["features"] for d, deps in trains.items() if "features" in deps} == {features.hash}
    assert "features" not in trains["small"] and "data" not in trains["plain"]
    # a training's hash names the states of its own layers: a drafter reading other layers, added
    # or dropped, changes the target pass, not the other trainings
    alone = yaml.safe_load(yaml.safe_dump(data))
    alone["drafters"] = [d for d in alone["drafters"] if d["name"] in ("pre", "post")]
    solo = plan_of(alone)
    (solo_features,) = [j for j in solo.jobs if j.kind == "target_features"]
    assert [r.fusion for r in solo_features.config.rules] == ["tri"] and solo_features.hash != features.hash
    assert hashes(solo)["train_drafter t/pre"] == hashes(plan)["train_drafter t/pre"]
    assert jobs[hashes(plan)["train_drafter t/head"]].config.drafter.kind == "mtp"
    # the text depends on the spec's training_data; changing it re-runs only what trained on it
    more = dict(data, training_data={"tokens": 5000})
    changed = {j.name for j in plan_of(more).jobs} - {j.name for j in plan.jobs}
    assert not changed
    before, after = hashes(plan), hashes(plan_of(more))
    assert before["measure_curve t/plain"] == after["measure_curve t/plain"]
    assert (
        before["regenerate t"] != after["regenerate t"]
        and before["train_drafter t/small"] != after["train_drafter t/small"]
    )


def test_the_cost_table_times_the_engine_on_the_curves_prompts_and_depends_on_nothing_else_of_them():
    plan = plan_of(BASE)
    profile = next(j for j in plan.jobs if j.kind == "profile_cost")
    curve = next(j for j in plan.jobs if j.kind == "measure_curve" and j.drafter == profile.drafter)
    timed, evaluation = profile.config.prompts, curve.config.evaluation
    assert profile.config.seed == curve.config.seed  # the same draw of prompts
    assert (timed.num_prompts, timed.prompt_len, timed.new_tokens, timed.condition) == (
        evaluation.num_prompts,
        evaluation.prompt_len,
        evaluation.continuation_len,
        evaluation.conditions[0],
    )
    before = hashes(plan)
    for change, retimed in (("temperatures", False), ("continuation_len", True), ("num_prompts", True)):
        value = {"temperatures": [0.0, 1.0], "continuation_len": 12, "num_prompts": 5}[change]
        after = hashes(plan_of(modified(["evaluation"], {"max_depth": 4, change: value})))
        assert (after["profile_cost t/pre"] != before["profile_cost t/pre"]) is retimed, change


def test_a_block_drafter_is_measured_checked_and_timed_to_its_block_and_the_others_to_the_spec_depth():
    data = modified(["evaluation", "max_depth"], 6)
    data["drafters"].append({"name": "b4", "kind": "dflash", "block_size": 4})
    data["validation"] = {"num_prompts": 2}
    plan = plan_of(data)
    depth = {
        (j.kind, j.drafter): (j.config.max_depth if j.kind == "profile_cost" else j.config.evaluation.max_depth)
        for j in plan.jobs
        if j.kind in ("measure_curve", "profile_cost", "measure_speedup")
    }
    assert {d for (_, name), d in depth.items() if name == "b4"} == {3}  # 3 drafts a block of 4
    assert {d for (_, name), d in depth.items() if name != "b4"} == {6}
    # a block drafter whose block holds the spec's depth plans as before
    data["drafters"][-1]["block_size"] = 7
    assert {j.config.evaluation.max_depth for j in plan_of(data).jobs if j.kind == "measure_curve"} == {6}


def test_a_block_drafter_run_on_blocks_of_its_depth_shares_the_training_and_is_measured_apart():
    """`block_drafting` changes how a DFlash drafter is run, not how it is trained: two entries that differ
    there train once, measure, time and validate apart, and the depth choice records the rule."""
    data = modified(["drafters"], [{"name": "whole", "kind": "dflash", "block_size": 4}])
    data["drafters"].append({"name": "short", "kind": "dflash", "block_size": 4, "block_drafting": "depth"})
    data["validation"] = {"num_prompts": 2}
    plan = plan_of(data)
    assert [j.kind for j in plan.jobs].count("train_drafter") == 1
    for kind in ("measure_curve", "profile_cost", "measure_speedup", "select_depth"):
        assert len({j.hash for j in plan.jobs if j.kind == kind}) == 2, kind
    rules = {j.drafter: j.config.block_drafting for j in plan.jobs if j.kind == "select_depth"}
    assert rules == {"whole": "trained", "short": "depth"}
    # an EAGLE-3 drafter has no block: its choice records none, and the spec refuses the field on it
    assert {j.config.block_drafting for j in plan_of(BASE).jobs if j.kind == "select_depth"} == {None}
    with pytest.raises(SpecError, match=r"drafters\[0\].block_drafting: unknown key"):
        plan_of(modified(["drafters", 0, "block_drafting"], "depth"))


def test_a_distillation_stage_reuses_the_drafters_training_and_feeds_every_later_job():
    """Three stages on one imitation-trained drafter (Draft-OPD, its ablation, imitation continued):
    one train_drafter job, three distill_drafter jobs on its checkpoint, and each pairing's curve,
    cost and validation read its own stage's drafter; only the imitation control reads the training text."""
    base = {"name": "post", "kind": "eagle3", "norm": "post", "train": {"corpus": "regenerated", "ttt_depth": 2}}
    data = modified(["drafters"], [base])
    for method in ("opd", "opd_random_anchor", "imitation"):
        data["drafters"].append({**base, "name": method, "distill": {"method": method, "rounds": 1}})
    data["validation"] = {"num_prompts": 2}
    plan = plan_of(data)
    by = {(j.kind, j.drafter): j for j in plan.jobs}
    assert [j.kind for j in plan.jobs].count("train_drafter") == 1
    trained = next(j.hash for j in plan.jobs if j.kind == "train_drafter")
    for method in ("opd", "opd_random_anchor", "imitation"):
        stage = by["distill_drafter", method]
        deps = dict(stage.deps)
        assert deps["drafter"] == trained and stage.config.drafter.distill.method == method
        assert ("data" in deps) == (method == "imitation")
        for kind in ("measure_curve", "profile_cost", "measure_speedup"):
            assert dict(by[kind, method].deps)["drafter"] == stage.hash, (kind, method)
    assert dict(by["measure_curve", "post"].deps)["drafter"] == trained
    # the stage's settings change the stage and what follows it, never the training before it
    data["drafters"][1]["distill"]["decay"] = 0.5
    again = {(j.kind, j.drafter): j.hash for j in plan_of(data).jobs}
    assert again["train_drafter", "post"] == by["train_drafter", "post"].hash
    assert again["distill_drafter", "opd"] != by["distill_drafter", "opd"].hash
    assert again["distill_drafter", "imitation"] == by["distill_drafter", "imitation"].hash
    # nor does what only rollouts read change the imitation control, which rolls nothing out
    data["drafters"][3]["distill"] |= {"decay": 0.5, "depth": 2, "prompts": 8}
    assert {(j.kind, j.drafter): j.hash for j in plan_of(data).jobs}["distill_drafter", "imitation"] == (
        by["distill_drafter", "imitation"].hash
    )
    data["drafters"][3]["distill"]["lr"] = 1e-3  # its optimizer's settings do
    assert {(j.kind, j.drafter): j.hash for j in plan_of(data).jobs}["distill_drafter", "imitation"] != (
        by["distill_drafter", "imitation"].hash
    )
    # a repeat with another stage seed is another stage on the same training
    data["drafters"].append({**base, "name": "opd-s1", "distill": {"method": "opd", "rounds": 1, "seed": 1}})
    repeat = {(j.kind, j.drafter): j for j in plan_of(data).jobs}
    assert repeat["distill_drafter", "opd-s1"].hash not in {j.hash for j in plan.jobs}
    assert dict(repeat["distill_drafter", "opd-s1"].deps)["drafter"] == trained


def test_imitation_cannot_continue_a_checkpoint_trained_elsewhere(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    data = modified(
        ["drafters"], [{"name": "x", "kind": "eagle3", "path": str(tmp_path), "distill": {"method": "imitation"}}]
    )
    with pytest.raises(SpecError, match="distill.method: imitation continues the drafter's own training"):
        plan_of(data)
    data["drafters"][0]["distill"]["method"] = "opd"
    assert [j.kind for j in plan_of(data).jobs if j.drafter == "x"][0] == "distill_drafter"
