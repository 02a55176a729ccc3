"""Prompts files: the three chat shapes in JSONL, JSON and Parquet, their errors, and the spec fields."""

from __future__ import annotations

import json
import re
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.conversations import Conversation, Message, PromptsError, read_conversations
from pipeline.core.labels import LABEL_MAX, label_problem
from pipeline.errors import SpecError
from pipeline.spec import parse_spec

SHAREGPT = {
    "conversations": [
        {"from": "system", "value": "Be brief."},
        {"from": "human", "value": "Add 2 and 3."},
        {"from": "gpt", "value": "5"},
        {"from": "human", "value": "And 4 more?"},
    ],
    "category": "math",
}
OPENAI = {
    "messages": [
        {"role": "developer", "content": "You write Python."},
        {"role": "user", "content": [{"type": "text", "text": "Reverse "}, {"type": "text", "text": "a list."}]},
        {"role": "assistant", "content": "xs[::-1]"},
    ],
    "category": "code",
}
PLAIN = {"prompt": "Say hello.", "completion": "Hello!"}
EXPECTED = [
    Conversation(
        (
            Message("system", "Be brief."),
            Message("user", "Add 2 and 3."),
            Message("assistant", "5"),
            Message("user", "And 4 more?"),
        ),
        "math",
    ),
    Conversation(
        (Message("system", "You write Python."), Message("user", "Reverse a list."), Message("assistant", "xs[::-1]")),
        "code",
    ),
    Conversation((Message("user", "Say hello."), Message("assistant", "Hello!")), "uncategorized"),
]


def write_jsonl(path, records):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


def write_json(path, records):
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def write_parquet(path, records):
    """One column per shape, as a dataset exported with `datasets`' to_parquet has (null where absent)."""
    keys = list(dict.fromkeys(k for r in records for k in r))
    pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in keys} for r in records]), path)
    return path


WRITERS = {"jsonl": write_jsonl, "json": write_json, "parquet": write_parquet}


@pytest.mark.parametrize("fmt", WRITERS)
def test_each_format_reads_every_shape_in_order(tmp_path, fmt):
    # a Parquet column holds one type: text parts or plain strings, not both (the parts are tested in JSONL/JSON)
    openai = (
        OPENAI
        if fmt != "parquet"
        else {
            **OPENAI,
            "messages": [
                {**m, "content": "Reverse a list."} if isinstance(m["content"], list) else m for m in OPENAI["messages"]
            ],
        }
    )
    path = WRITERS[fmt](tmp_path / f"p.{fmt}", [SHAREGPT, openai, PLAIN])
    assert read_conversations(path) == EXPECTED
    # without a category field nothing is categorised; another field name can be chosen
    assert {c.category for c in read_conversations(path, None)} == {None}
    assert {c.category for c in read_conversations(path, "topic")} == {None}


def test_prompt_turns_end_at_the_last_user_turn():
    turns, answer = EXPECTED[0].prompt_turns()
    assert [m.content for m in turns] == ["Be brief.", "Add 2 and 3.", "5", "And 4 more?"] and answer is None
    turns, answer = EXPECTED[1].prompt_turns()
    assert turns[-1] == Message("user", "Reverse a list.") and answer == "xs[::-1]"


BAD = [
    ("bad.jsonl", '{"prompt": "a"}\n{"prompt": \n', "bad.jsonl, line 2: invalid JSON"),
    ("list.json", '{"prompt": "a"}', "a JSON file must hold a list of records, got dict"),
    (
        "role.jsonl",
        json.dumps({"conversations": [{"from": "tool", "value": "x"}]}),
        "line 1: conversations[0].from: 'tool' is not a chat role",
    ),
    (
        "two.jsonl",
        json.dumps({"prompt": "a", "messages": [{"role": "user", "content": "b"}]}),
        "needs exactly one of conversations, messages, prompt (it has messages and prompt)",
    ),
    (
        "none.jsonl",
        json.dumps({"text": "a"}),
        "needs exactly one of conversations, messages, prompt (its fields are text)",
    ),
    (
        "empty_text.jsonl",
        json.dumps({"messages": [{"role": "user", "content": "  "}]}),
        "line 1: messages[0].content: empty text",
    ),
    (
        "image.jsonl",
        json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}),
        "messages[0].content: only text parts are supported, got a 'image_url' part",
    ),
    (
        "late_system.jsonl",
        json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]}),
        "a system turn must come before the others",
    ),
    (
        "assistant_first.jsonl",
        json.dumps({"conversations": [{"from": "gpt", "value": "a"}]}),
        "must have a user turn before any assistant turn",
    ),
    (
        "category.jsonl",
        json.dumps({"prompt": "a", "category": 3}),
        "line 1: category must be a non-empty string, got 3",
    ),
    (
        "long_category.jsonl",
        json.dumps({"prompt": "a", "category": "c"}) + "\n" + json.dumps({"prompt": "b", "category": "c" * 300}),
        "line 2: category 'ccc",  # ... is 300 characters long; at most 255 are stored
    ),
    (
        "newline_category.jsonl",
        json.dumps({"prompt": "a", "category": "code\nmath"}),
        "line 1: category 'code\\nmath' holds the non-printing character '\\n'",
    ),
    (
        "both_answers.jsonl",
        json.dumps({"prompt": "a", "completion": "b", "response": "c"}),
        "completion or response, not both",
    ),
    ("empty.jsonl", "\n\n", "empty.jsonl: no records"),
    ("turns.json", json.dumps([{"messages": []}]), "record 1: messages must be a non-empty list of turns"),
    ("prompts.csv", "prompt\na\n", "unknown format '.csv'"),
]


@pytest.mark.parametrize("name,text,message", BAD, ids=[b[0] for b in BAD])
def test_a_bad_file_is_one_line_naming_file_and_record(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PromptsError, match=re.escape(message)) as caught:
        read_conversations(path)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_unreadable_files_name_themselves(tmp_path):
    with pytest.raises(PromptsError, match="not found"):
        read_conversations(tmp_path / "missing.jsonl")
    (tmp_path / "latin.jsonl").write_bytes(b'{"prompt": "caf\xe9"}\n')
    with pytest.raises(PromptsError, match=r"latin.jsonl: not UTF-8 text"):
        read_conversations(tmp_path / "latin.jsonl")
    good = write_parquet(tmp_path / "good.parquet", [PLAIN])
    (tmp_path / "cut.parquet").write_bytes(good.read_bytes()[:40])
    with pytest.raises(PromptsError, match=r"cut.parquet: not a readable Parquet file"):
        read_conversations(tmp_path / "cut.parquet")
    write_parquet(tmp_path / "other.parquet", [{"text": "a"}])
    with pytest.raises(PromptsError, match=r"other.parquet, record 1: a record needs exactly one of"):
        read_conversations(tmp_path / "other.parquet")


def _spec(evaluation: dict, **extra) -> str:
    spec = {
        "name": "s",
        "targets": [{"name": "t", "builtin": {}}],
        "drafters": [{"name": "d"}],
        "evaluation": evaluation,
        **extra,
    }
    return json.dumps(spec)  # JSON is YAML


def test_the_spec_reads_the_file_and_hashes_it_by_content(tmp_path, monkeypatch):
    from pipeline.plan import build_plan

    path = write_jsonl(tmp_path / "p.jsonl", [SHAREGPT, OPENAI, PLAIN])
    monkeypatch.chdir(tmp_path)
    spec = parse_spec(_spec({"prompts": "p.jsonl", "num_prompts": 2, "conditions": ["default", "no_template"]}))
    prompts = spec.evaluation.prompts
    assert prompts.path == str(path) and prompts.conversations == 3  # relative to where specfleet runs
    assert prompts.categories == ("code", "math", "uncategorized") and len(prompts.digest) == 64

    def curve_hash(text: str) -> str:
        plan = build_plan(parse_spec(text), lambda modules: "v")
        return next(j.hash for j in plan.jobs if j.kind == "measure_curve")

    moved = tmp_path / "elsewhere.jsonl"
    shutil.copy(path, moved)
    same = curve_hash(_spec({"prompts": str(moved), "num_prompts": 2}))
    assert same == curve_hash(_spec({"prompts": {"path": str(path)}, "num_prompts": 2}))  # a moved file: no rerun
    write_jsonl(moved, [SHAREGPT, OPENAI])
    assert curve_hash(_spec({"prompts": str(moved), "num_prompts": 2})) != same  # new content: measured again
    assert curve_hash(_spec({"prompts": {"path": str(path), "category": None}, "num_prompts": 2})) != same


SPEC_ERRORS = [
    (
        {"prompts": "p.jsonl", "num_prompts": 4},
        {},
        "evaluation: prompts: {path} holds 3 conversation(s), fewer than num_prompts 4",
    ),
    (
        {"prompts": "p.jsonl", "num_prompts": 2},
        {"validation": {"num_prompts": 2}},
        "the curve's 2 and validation's 2 held-out prompts need 4",
    ),
    ({"prompts": "p.jsonl", "corpus": "chat"}, {}, "give corpus (a built-in corpus) or prompts (a file), not both"),
    (
        {"prompts": {"path": "p.jsonl", "digest": "0" * 64}},
        {},
        "evaluation.prompts.digest: specfleet fills this in when it reads the file; drop it",
    ),
    ({"prompts": "missing.jsonl"}, {}, "evaluation.prompts: prompts file {dir}/missing.jsonl: not found"),
    (
        {"prompts": "p.jsonl", "num_prompts": 2},
        {"training_data": {"prompts": "p.jsonl"}},
        "training_data.prompts and evaluation.prompts are the same file",
    ),
    (
        {},
        {"training_data": {"answers": "as_written"}},
        "answers: as_written takes the assistant turns of a prompts file",
    ),
    (
        {"conditions": ["no_template"]},
        {},
        "condition 'no_template' changes a chat template: it needs corpus: chat or a prompts file",
    ),
]


@pytest.mark.parametrize("evaluation,extra,message", SPEC_ERRORS)
def test_spec_errors_name_the_field(tmp_path, monkeypatch, evaluation, extra, message):
    path = write_jsonl(tmp_path / "p.jsonl", [SHAREGPT, OPENAI, PLAIN])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError) as caught:
        parse_spec(_spec(evaluation, **extra))
    assert message.format(path=path, dir=tmp_path) in str(caught.value)


def test_chat_conditions_and_training_prompts_are_accepted_with_files(tmp_path, monkeypatch):
    write_jsonl(tmp_path / "eval.jsonl", [SHAREGPT, OPENAI, PLAIN])
    write_json(tmp_path / "train.json", [OPENAI, PLAIN])
    monkeypatch.chdir(tmp_path)
    spec = parse_spec(
        _spec(
            {"prompts": "eval.jsonl", "num_prompts": 3, "conditions": ["template_no_bos", "no_template"]},
            training_data={"prompts": {"path": "train.json", "category": None}, "answers": "as_written"},
        )
    )
    assert spec.training_data.prompts.conversations == 2 and spec.training_data.prompts.categories is None


@settings(max_examples=200, deadline=None)
@given(category=st.text(st.characters(exclude_categories=("Cs",)), max_size=LABEL_MAX + 3))
def test_a_fuzzed_category_is_kept_trimmed_or_refused_on_one_line(tmp_path_factory, category):
    """Any string in a file's category field: the conversation keeps it (its ends trimmed, as a
    JSON field's padding), or the file is refused in one line that names the file, the line and
    the field."""
    path = tmp_path_factory.mktemp("fuzz") / "c.jsonl"
    path.write_text(json.dumps({"prompt": "a", "category": category}) + "\n", encoding="utf-8")
    trimmed = category.strip()
    try:
        (conversation,) = read_conversations(path)
    except PromptsError as exc:
        assert not trimmed or label_problem(trimmed), trimmed
        message = str(exc)
        assert "\n" not in message and message.startswith(f"prompts file {path}, line 1: category "), message
        return
    assert label_problem(trimmed) is None and conversation.category == trimmed
