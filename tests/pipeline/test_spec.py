"""Spec validation: every error names its field (and YAML line), all at once, nothing written."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.paths import REPO

from pipeline.errors import SpecError
from pipeline.spec import load_spec, parse_spec

ROOT = REPO

GOOD = """\
name: ok
targets:
  - name: t
    builtin: {layers: 4, hidden_size: 64, heads: 4}
drafters:
  - name: d
    kind: eagle3
    train: {ttt_depth: 2}
"""


def errors_of(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(text, "s.yaml")
    return info.value.messages


def test_good_spec_and_defaults():
    spec = parse_spec(GOOD)
    assert spec.pairings == "all" and len(spec.pairing_list()) == 1
    assert spec.drafters[0].norm == "pre" and spec.drafters[0].fusion == "tri"
    assert spec.resources_for("train_drafter").num_gpus == 0


def test_quickstart_is_valid():
    spec, _ = load_spec(ROOT / "experiments" / "quickstart.yaml")
    assert {d.norm for d in spec.drafters} == {"pre", "post"}


@pytest.mark.parametrize(
    "change,field,line",
    [
        (("ttt_depth: 2", "ttt_depth: 0"), "drafters[0].train.ttt_depth", 8),
        (("kind: eagle3", "kind: eagle3\n    norm: sideways"), "drafters[0].norm", 8),
        (("kind: eagle3", "kind: eagle3\n    fusion: all"), "drafters[0].fusion", 8),
        (("kind: eagle3", "kind: eagle3\n    colour: red"), "drafters[0].colour", 8),
        (("heads: 4}", "heads: 5}"), "targets[0].builtin", 4),
        (("name: t\n", "name: t\n    hf: ./no/such/model\n"), "targets[0]", 3),
        (("name: ok\n", "name: ok\nevaluation: {max_depth: 0}\n"), "evaluation.max_depth", 2),
        (("name: ok\n", "name: ok\nevaluation: {temperatures: [-1]}\n"), "evaluation.temperatures[0]", 2),
        (("name: ok\n", "name: ok\nevaluation: {conditions: [no_template]}\n"), "evaluation", 2),
        (
            ("name: ok\n", "name: ok\nevaluation: {conditions: [{noise: sideways, a: 1}]}\n"),
            "evaluation.conditions[0]",
            2,
        ),
        (("name: ok\n", "name: ok\nresources: {train_gpu: {num_gpus: 1}}\n"), "resources.train_gpu", 2),
        (
            ("name: ok\n", "name: ok\nresources: {train_drafter: {num_gpus: -1}}\n"),
            "resources.train_drafter.num_gpus",
            2,
        ),
        (("name: ok\n", "name: ok\npairings: [{target: t, drafter: zz}]\n"), "pairings[0].drafter", 2),
        (("name: ok\n", "name: ok\ncost: {repeats: 0}\n"), "cost.repeats", 2),
        (("name: ok\n", "name: ok\npairings: []\n"), "pairings", 2),
        (("ttt_depth: 2}", "ttt_depth: 9, seq_len: 10}"), "drafters[0].train", 8),
        (  # validation decoding past the positions the curve measured: the prediction says nothing there
            ("name: ok\n", "name: ok\nevaluation: {continuation_len: 16}\nvalidation:\n  new_tokens: 32\n"),
            "validation.new_tokens",
            4,
        ),
        (  # validating on more of the curve's prompts than it measured
            ("name: ok\n", "name: ok\nevaluation: {num_prompts: 4}\nvalidation:\n  num_prompts: 8\n  prompts: curve\n"),
            "validation.num_prompts",
            4,
        ),
        (
            ("name: ok\n", "name: ok\nevaluation: {num_prompts: 4, diagnostic_prompts: 8}\n"),
            "evaluation: diagnostic_prompts",
            2,
        ),
    ],
)
def test_each_error_names_its_field_and_line(change, field, line):
    msgs = errors_of(GOOD.replace(*change, 1))
    assert len(msgs) == 1, msgs
    assert msgs[0].startswith(f"{field}:"), msgs
    assert msgs[0].endswith(f"(line {line})"), msgs


def test_validation_may_decode_as_far_as_the_curve_measured():
    spec = parse_spec(GOOD + "evaluation: {continuation_len: 16}\nvalidation: {new_tokens: 16}\n")
    assert spec.validation.new_tokens == spec.evaluation.continuation_len == 16


def test_all_errors_at_once():
    text = GOOD.replace("ttt_depth: 2", "ttt_depth: 0").replace("name: ok\n", "name: ok\nbogus: 1\n")
    text += "  - name: d\n"
    msgs = errors_of(text)
    fields = sorted(m.split(":")[0] for m in msgs)
    assert fields == ["bogus", "drafters[0].train.ttt_depth", "drafters[1].name"]


def test_an_unknown_drafter_kind_names_every_kind():
    for kind, got in (("medusa", "'medusa'"), ("Eagle3", "'Eagle3'"), ("[eagle3]", "['eagle3']")):
        msgs = errors_of(GOOD.replace("kind: eagle3", f"kind: {kind}"))
        assert msgs == [
            f"drafters[0].kind: unknown drafter kind {got}; use one of eagle3, mtp, dflash, standalone (line 7)"
        ]


def test_an_mtp_head_takes_its_recipe_and_the_vanilla_recipe_one_step():
    spec = parse_spec(GOOD.replace("kind: eagle3\n    train: {ttt_depth: 2}", "kind: mtp"))
    head = spec.drafters[0]
    assert (head.kind, head.recipe, head.norm, head.train.ttt_depth) == ("mtp", "recursive", "pre", 3)
    assert head.target_states == {"fusion": "last", "capture_layers": None}
    vanilla = parse_spec(GOOD.replace("kind: eagle3\n    train: {ttt_depth: 2}", "kind: mtp\n    recipe: vanilla"))
    assert vanilla.drafters[0].recipe == "vanilla"
    msgs = errors_of(GOOD.replace("kind: eagle3", "kind: mtp\n    recipe: vanilla"))
    assert len(msgs) == 1 and msgs[0].startswith("drafters[0]: ") and "train.ttt_depth: the vanilla recipe" in msgs[0]
    (msg,) = errors_of(GOOD.replace("kind: eagle3", "kind: mtp\n    recipe: deep"))
    assert msg.startswith("drafters[0].recipe:")
    (msg,) = errors_of(GOOD.replace("kind: eagle3", "kind: mtp\n    fusion: tri"))  # an EAGLE switch
    assert msg.startswith("drafters[0].fusion:")


def test_a_dflash_drafter_drafts_within_its_block_and_no_tree():
    dflash = GOOD.replace("kind: eagle3\n    train: {ttt_depth: 2}", "kind: dflash\n    block_size: 7")
    spec = parse_spec(dflash + "evaluation: {max_depth: 6}\n")
    drafter = spec.drafters[0]
    assert (drafter.layers, drafter.block_size, drafter.target_states["fusion"]) == (1, 7, "spread1")
    # measured as deep as its block drafts, whatever the spec's depth; other drafters to that depth
    deep = parse_spec(dflash + "evaluation: {max_depth: 9}\n")
    assert deep.evaluation_for(deep.drafters[0]).max_depth == 6 and deep.evaluation.max_depth == 9
    assert spec.evaluation_for(drafter) is spec.evaluation
    (msg,) = errors_of(dflash.replace("block_size: 7", "block_size: 8\n    train: {seq_len: 8}"))
    assert msg.startswith("drafters[0]: block_size 8 leaves no context")


@pytest.mark.parametrize(
    "change,message",
    [
        (
            ("name: ok\n", "name: ok\nevaluation: {temprature: [0]}\n"),
            "evaluation.temprature: unknown key 'temprature' in evaluation: did you mean 'temperatures'? (line 2)",
        ),
        (
            ("name: ok\n", "name: ok\nevaluaton: {}\n"),
            "evaluaton: unknown key 'evaluaton': did you mean 'evaluation'? (line 2)",
        ),
        (
            ("ttt_depth: 2", "tt_depth: 2"),
            "drafters[0].train.tt_depth: unknown key 'tt_depth' in drafters[0].train: "
            "did you mean 'ttt_depth'? (line 8)",
        ),
        (
            ("name: ok\n", "name: ok\npairings: [{target: t, drafter: d, drafterr: d}]\n"),
            "pairings[0].drafterr: unknown key 'drafterr' in pairings[0]: did you mean 'drafter'? (line 2)",
        ),
        (
            ("name: ok\n", "name: ok\nresources: {train_drafter: {num_gpu: 1}}\n"),
            "resources.train_drafter.num_gpu: unknown key 'num_gpu' in resources.train_drafter: "
            "did you mean 'num_gpus'? (line 2)",
        ),
        (
            ("kind: eagle3", "kind: eagle3\n    colour: red"),
            "drafters[0].colour: unknown key 'colour' in drafters[0] (line 8)",
        ),
    ],
)
def test_an_unknown_key_suggests_the_nearest_known_one(change, message):
    assert errors_of(GOOD.replace(*change, 1)) == [message]


def test_missing_required_and_malformed_yaml():
    assert errors_of("name: x\n")[0].startswith("targets: Field required")
    msgs = errors_of("name: [unclosed\n")
    assert msgs[0].startswith("(yaml):") and "line" in msgs[0]
    assert errors_of("- just\n- a list\n")[0].startswith("(top level)")


def test_a_key_given_twice_is_an_error_naming_both_lines():
    # top level (two evaluation blocks: PyYAML would keep only the second), nested, and in a list item
    text = GOOD + "evaluation: {max_depth: 4}\nevaluation: {max_depth: 6, max_depth: 7}\n"
    text = text.replace("kind: eagle3", "kind: eagle3\n    kind: eagle3")
    msgs = errors_of(text)
    assert msgs == [
        "drafters[0].kind: key given twice (lines 7 and 8); keep one",
        "evaluation: key given twice (lines 10 and 11); keep one",
        "evaluation.max_depth: key given twice (lines 11 and 11); keep one",
    ], msgs
    assert parse_spec(GOOD + "evaluation: {max_depth: 4}\n").evaluation.max_depth == 4


def test_cli_validate_exit_code_and_nothing_written(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("ttt_depth: 2", "ttt_depth: 0"))
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "validate", str(bad)], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "drafters[0].train.ttt_depth: Input should be greater than or equal to 1, got 0 (line 8)" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(bad)], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]  # no .specfleet, no mlruns


@pytest.mark.parametrize("path", sorted((ROOT / "experiments").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_experiment_is_valid(path, tmp_path, monkeypatch):
    from support.vllm import fake_vllm_python

    # a spec with `serving:` reads vLLM's release from its environment: a stand-in answers here
    monkeypatch.setenv("SPECFLEET_VLLM_PYTHON", fake_vllm_python(tmp_path))
    spec, _ = load_spec(path)
    assert spec.pairing_list()
