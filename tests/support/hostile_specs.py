"""A corpus of hostile experiment specs: each must be refused by the spec loader with an error that
names the field or file, before anything starts. (name, YAML text or bytes, text the error holds)."""

from __future__ import annotations

import yaml
from support.paths import REPO

BASE = {"name": "h", "targets": [{"name": "t", "builtin": {}}], "drafters": [{"name": "d"}]}


def spec(**changes) -> str:
    """BASE with top-level keys replaced (None removes one), as YAML."""
    out = dict(BASE)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return yaml.safe_dump(out)


def target(**builtin) -> list:
    return [{"name": "t", "builtin": builtin}]


def drafter(**fields) -> list:
    return [{"name": "d", **fields}]


def nested(depth: int) -> str:
    return "name: h\nextra: " + "[" * depth + "]" * depth + "\n"


def laughs() -> str:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\nname: h\n"


HOSTILE: list[tuple[str, str | bytes, str]] = [
    # the file itself
    ("empty file", "", "(top level): must be a mapping"),
    ("a list", "- 1\n- 2\n", "(top level): must be a mapping"),
    ("a scalar", "just text\n", "(top level): must be a mapping"),
    ("not utf-8", b"name: caf\xe9\n", "not UTF-8"),
    ("binary", b"\x00\x01\x02\xff" * 64, "not UTF-8"),
    ("broken yaml", "name: [\n", "(yaml):"),
    ("tab indent", "name: h\n\ttargets: []\n", "(yaml):"),
    ("deep nesting", nested(5000), "nested deeper than"),
    ("billion laughs", laughs(), "aliases"),
    ("huge file", "name: h\n" + "# " + "x" * 2_000_000 + "\n", "larger than"),
    ("python tag", "name: !!python/object/apply:os.system ['true']\n", "(yaml):"),
    # names
    ("name a list", spec(name=["a", "b"]), "name"),
    ("name a map", spec(name={"a": 1}), "name"),
    ("name too long", spec(name="x" * 300), "name"),
    ("name with slash", spec(name="../etc"), "name"),
    ("target name a list", spec(targets=[{"name": ["t"], "builtin": {}}]), "targets[0].name"),
    ("drafter name too long", spec(drafters=drafter(name="d" * 300)), "drafters[0].name"),
    ("pairing target a list", spec(pairings=[{"target": ["t"], "drafter": "d"}]), "pairings[0].target"),
    ("pairing drafter a map", spec(pairings=[{"target": "t", "drafter": {"x": 1}}]), "pairings[0].drafter"),
    ("pairing unknown", spec(pairings=[{"target": "nope", "drafter": "d"}]), "unknown target"),
    ("targets a map", spec(targets={"t": {}}), "targets"),
    ("no targets", spec(targets=[]), "targets"),
    ("too many targets", spec(targets=[{"name": f"t{i}", "builtin": {}} for i in range(200)]), "targets"),
    ("duplicate names", spec(targets=[{"name": "t", "builtin": {}}] * 2), "duplicate name"),
    # numbers
    ("seed 400 digits", spec(seed=int("9" * 400)), "seed"),
    ("seed negative", spec(seed=-1), "seed"),
    ("seed a float", spec(seed=1.5), "seed"),
    ("infinite lr", spec(drafters=drafter(train={"lr": float("inf")})), "drafters[0].train.lr"),
    ("nan lr", spec(drafters=drafter(train={"lr": float("nan")})), "drafters[0].train.lr"),
    ("huge lr", spec(drafters=drafter(train={"lr": 1e9})), "drafters[0].train.lr"),
    ("infinite cost ratio", spec(cost={"cost_ratio": float("inf")}), "cost.cost_ratio"),
    ("nan temperature", spec(evaluation={"temperatures": [float("nan")]}), "evaluation.temperatures"),
    ("duplicate temperatures", spec(evaluation={"temperatures": [0.0, 0.0]}), "temperatures: each temperature once"),
    ("many temperatures", spec(evaluation={"temperatures": [i / 100 for i in range(100)]}), "evaluation.temperatures"),
    ("steps 10^9", spec(drafters=drafter(train={"steps": 10**9})), "drafters[0].train.steps"),
    ("hidden 10^9", spec(targets=target(hidden_size=10**9)), "targets[0].builtin.hidden_size"),
    ("layers 10^6", spec(targets=target(layers=10**6)), "targets[0].builtin.layers"),
    ("prompts 10^9", spec(evaluation={"num_prompts": 10**9}), "evaluation.num_prompts"),
    ("prompt_len 10^9", spec(evaluation={"prompt_len": 10**9}), "evaluation.prompt_len"),
    ("continuation 10^9", spec(evaluation={"continuation_len": 10**9}), "evaluation.continuation_len"),
    ("tokens 10^15", spec(training_data={"tokens": 10**15}), "training_data.tokens"),
    ("batch sizes 10^9", spec(cost={"batch_sizes": [1, 10**9], "max_batch_size": 10**9}), "cost"),
    ("repeats 10^9", spec(cost={"repeats": 10**9}), "cost.repeats"),
    ("validation prompts 10^9", spec(validation={"num_prompts": 10**9}), "validation.num_prompts"),
    ("num_gpus 10^6", spec(resources={"measure_curve": {"num_cpus": 1, "num_gpus": 10**6}}), "resources.measure_curve"),
    ("num_gpus 1.5", spec(resources={"measure_curve": {"num_gpus": 1.5}}), "resources.measure_curve"),
    ("num_cpus inf", spec(resources={"measure_curve": {"num_cpus": float("inf")}}), "resources.measure_curve"),
    ("max depth 0", spec(evaluation={"max_depth": 0}), "evaluation.max_depth"),
    ("a bool as a size", spec(evaluation={"num_prompts": True}), "evaluation.num_prompts"),
    ("a string as a size", spec(evaluation={"num_prompts": "many"}), "evaluation.num_prompts"),
    # structure
    ("noise level a list", spec(evaluation={"conditions": [{"noise": "hidden", "a": [1]}]}), "evaluation.conditions"),
    (
        "noise level a map",
        spec(evaluation={"conditions": [{"noise": "hidden", "a": {"x": 1}}]}),
        "evaluation.conditions",
    ),
    (
        "noise level inf",
        spec(evaluation={"conditions": [{"noise": "hidden", "a": float("inf")}]}),
        "evaluation.conditions",
    ),
    ("condition a list", spec(evaluation={"conditions": [["default"]]}), "evaluation.conditions"),
    ("unknown condition", spec(evaluation={"conditions": ["rainy"]}), "evaluation.conditions"),
    ("unknown key", spec(evaluaton={}), "evaluaton: unknown key"),
    ("unknown job kind", spec(resources={"bake": {}}), "resources"),
    ("drafter kind a list", spec(drafters=drafter(kind=["eagle3"])), "drafters[0]"),
    ("capture layers huge", spec(drafters=drafter(capture_layers=[1, 2, 10**12])), "drafters[0].capture_layers"),
    ("evaluation a list", spec(evaluation=[1, 2]), "evaluation"),
    ("cost a string", spec(cost="cheap"), "cost"),
    ("hf a list", spec(targets=[{"name": "t", "hf": ["a"]}]), "targets[0].hf"),
    ("local model missing", spec(targets=[{"name": "t", "hf": "/nonexistent/model"}]), "targets[0]"),
    ("prompts file missing", spec(evaluation={"prompts": "/nonexistent/p.jsonl"}), "evaluation.prompts"),
    ("prompts a number", spec(evaluation={"prompts": 3}), "evaluation.prompts"),
    ("duplicate key", "name: h\nname: h2\n", "key given twice"),
    ("key with a newline", 'name: h\nevaluation: {"\\n": 1}\n', "evaluation['\\n']: unknown key"),  # found by fuzzing
    (
        "a token written in the spec",
        spec(runtime_env={"env_vars": {"HF_TOKEN": "hf_x"}}),
        "runtime_env: env_vars.HF_TOKEN",
    ),
    ("env var name with a space", spec(runtime_env={"env_vars": {"A B": "1"}}), "runtime_env.env_vars"),
    ("env vars a list", spec(runtime_env={"env_vars": ["A=1"]}), "runtime_env.env_vars"),
    ("pip a map", spec(runtime_env={"pip": {"torch": 1}}), "runtime_env.pip"),
    ("runtime_env conda", spec(runtime_env={"conda": "base"}), "runtime_env.conda: unknown key"),
    # overlong and odd free text, refused where it enters (pipeline/core/labels.py)
    ("hf past any path", spec(targets=[{"name": "t", "hf": "x" * 5000}]), "targets[0].hf: String should have at most"),
    ("hf a name too long", spec(targets=[{"name": "t", "hf": "/tmp/" + "x" * 300}]), "hf: cannot read"),
    ("gguf a name too long", spec(targets=[{"name": "t", "gguf": "/tmp/" + "x" * 300 + ".gguf"}]), "gguf: cannot read"),
    ("package name too long", spec(targets=[{"name": "t", "package": "p" * 300}]), "targets[0].package"),
    ("drafter path too long", spec(drafters=[{"name": "d", "path": "/tmp/" + "y" * 300}]), "path: cannot read"),
    (
        "draft model hf too long",
        spec(drafters=[{"name": "d", "kind": "standalone", "hf": "/tmp/" + "y" * 300}]),
        "drafters[0]: hf: cannot read",
    ),
    ("prompts path too long", spec(evaluation={"prompts": "/tmp/" + "p" * 300 + ".jsonl"}), "cannot read it"),
    (
        "category field too long",
        spec(evaluation={"prompts": {"path": str(REPO / "experiments/prompts/eval.jsonl"), "category": "c" * 300}}),
        "evaluation.prompts.category: String should have at most 100 characters",
    ),
    ("target name with a newline", spec(targets=[{"name": "t\nu", "builtin": {}}]), "targets[0].name"),
]
