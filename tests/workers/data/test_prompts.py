"""A prompts file's conversations as evaluation prompts and training text, with the target's own template."""

from __future__ import annotations

import copy
import json
import socket

import pytest

from pipeline.core.acceptance import curve_from_accepted, decode_walk, walk_accept_len
from pipeline.core.categories import category_curves, choose_by_category, split_by_category
from pipeline.core.choice import choose_depth
from pipeline.core.contracts import Dataset, Measured, MeasuredCurve
from pipeline.core.conversations import Message
from pipeline.core.settings import PromptsFile, TrainingData
from workers.data.chat_format import assistant_spans, turns_ids, turns_text
from workers.data.prompts import build_prompts, prompt_categories, read_prompts_file

# A ChatML-style template of the kind Qwen and SmolLM2 ship (written here, not copied): every turn
# is <|im_start|>role\ntext<|im_end|>\n, and the generation prompt opens the assistant's turn.
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

LONG = {
    "messages": [
        {"role": "system", "content": "Answer in Python."},
        {"role": "user", "content": "Open a file and read its lines one by one please."},
        {"role": "assistant", "content": "with open(path) as f:\n    lines = f.readlines()"},
        {"role": "user", "content": "Now count the words in every line of the file."},
        {"role": "assistant", "content": "sum(len(line.split()) for line in lines)"},
    ],
    "category": "code",
}
ASK = {"conversations": [{"from": "human", "value": "What does the os module do?"}], "category": "chat"}


@pytest.fixture()
def templated(tiny_target):
    """The tiny target's tokenizer with a chat template of its own (a copy: the fixture is shared)."""
    tok = copy.deepcopy(tiny_target[1])
    tok.chat_template = TEMPLATE
    return tok


def prompts_file(tmp_path, records, name="p.jsonl") -> PromptsFile:
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return PromptsFile.model_validate(str(path))


def _build(tok, pf, **kw):
    args = dict(
        corpus="stdlib",
        condition="default",
        num_prompts=pf.conversations,
        prompt_len=400,
        long_context_len=600,
        seed=0,
        answer_prefix=0,
        prompts_file=pf,
    )
    return build_prompts(tok, **{**args, **kw})


def test_a_prompt_is_the_conversation_to_its_last_user_turn_in_the_targets_template(tmp_path, templated):
    pf = prompts_file(tmp_path, [LONG])
    (prompt,) = _build(templated, pf)
    text = templated.decode(prompt[1:])  # after BOS
    assert prompt[0].item() == templated.bos_token_id
    assert text == templated.apply_chat_template(
        [{k: v for k, v in m.items()} for m in LONG["messages"][:4]], tokenize=False, add_generation_prompt=True
    )
    assert text.endswith("count the words in every line of the file.<|im_end|>\n<|im_start|>assistant\n")
    # answer_prefix runs into the reference answer that followed the last user turn
    (mid,) = _build(templated, pf, answer_prefix=4)
    answer = templated("sum(len(line.split()) for line in lines)", add_special_tokens=False)["input_ids"][:4]
    assert mid.tolist() == prompt.tolist() + answer
    # without the template only the texts remain, the system turn dropped
    (bare,) = _build(templated, pf, condition="no_template_no_bos")
    assert "<|im_start|>" not in templated.decode(bare) and "Answer in Python" not in templated.decode(bare)


def test_a_long_conversation_loses_its_oldest_turns_then_the_end_of_its_question(tmp_path, templated):
    pf = prompts_file(tmp_path, [LONG])
    (whole,) = _build(templated, pf)
    (short,) = _build(templated, pf, prompt_len=whole.numel() - 1)
    text = templated.decode(short[1:])
    # the first exchange went, the system turn and the last question stayed whole
    assert text.startswith("<|im_start|>system\nAnswer in Python.<|im_end|>\n<|im_start|>user\nNow count")
    assert "Open a file" not in text and text.endswith("<|im_start|>assistant\n")
    system = Message("system", "Answer in Python.")
    frame = 1 + len(turns_ids(templated, (system, Message("user", "")), template=True, generation_prompt=True))
    (tiny,) = _build(templated, pf, prompt_len=frame + 6)  # room for the template and a few words of the question
    text = templated.decode(tiny[1:])
    assert tiny.numel() <= frame + 6 and text.startswith("<|im_start|>system\nAnswer in Python.<|im_end|>\n")
    assert "<|im_start|>user\nNow" in text and "file." not in text and text.endswith("<|im_start|>assistant\n")


def test_categories_follow_the_prompts_and_validation_draws_others(tmp_path, templated):
    from workers.measure.speedup import validation_prompts

    records = [
        dict(ASK, category=c, conversations=[{"from": "human", "value": f"Question {i} about {c}?"}])
        for i, c in enumerate(["code", "math", "chat"] * 4)
    ]
    pf = prompts_file(tmp_path, records)
    prompts = _build(templated, pf, num_prompts=8)
    cats = prompt_categories(pf, 8, 0)
    for p, c in zip(prompts, cats):
        assert f"about {c}?" in templated.decode(p)
    evaluation = type(
        "E",
        (),
        dict(
            num_prompts=8,
            corpus="stdlib",
            conditions=["default"],
            prompt_len=400,
            long_context_len=600,
            answer_prefix=0,
            prompts=pf,
        ),
    )
    held = validation_prompts(templated, evaluation, type("V", (), dict(num_prompts=4, prompts="heldout")), 0)
    assert len(held) == 4 and not {tuple(p.tolist()) for p in held} & {tuple(p.tolist()) for p in prompts}
    own = validation_prompts(templated, evaluation, type("V", (), dict(num_prompts=4, prompts="curve")), 0)
    assert [p.tolist() for p in own] == [p.tolist() for p in prompts[:4]]  # the curve's first four
    assert (
        prompt_categories(None, 8, 0) == ()
        and prompt_categories(prompts_file(tmp_path, [PLAIN_NO_CAT], "n.jsonl"), 1, 0) == ()
    )


PLAIN_NO_CAT = {"prompt": "Say hello."}


def test_a_worker_reads_only_the_file_the_spec_was_checked_against(tmp_path):
    pf = prompts_file(tmp_path, [ASK, LONG])
    assert len(read_prompts_file(pf)) == 2
    (tmp_path / "p.jsonl").write_text(json.dumps(ASK) + "\n")
    with pytest.raises(ValueError, match="p.jsonl: changed since the spec was read"):
        read_prompts_file(pf.model_copy(update={"category": None}))  # not the cached read
    (tmp_path / "p.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match=f"not found on node {socket.gethostname()}; every worker must see it"):
        read_prompts_file(pf.model_copy(update={"category": "topic"}))


@pytest.mark.parametrize("own_template", [True, False])
def test_assistant_turns_are_located_token_by_token(tiny_target, templated, own_template):
    tok = templated if own_template else tiny_target[1]
    end = "<|im_end|>\n" if own_template else "<|end|>"
    messages = tuple(Message(m["role"], m["content"]) for m in LONG["messages"])
    ids, spans = assistant_spans(tok, messages)
    assert tok.decode(ids) == turns_text(tok, messages, template=True, generation_prompt=False)
    assert [tok.decode(ids[a:b]) for a, b in spans] == [m.content + end for m in messages if m.role == "assistant"]


def test_written_answers_score_the_assistant_turns_only(tmp_path, templated):
    from workers.data.regenerate import load_text, written_answers

    pf = prompts_file(tmp_path, [LONG, ASK, LONG | {"category": "other"}])
    data = TrainingData(prompts=pf, answers="as_written", tokens=10_000, max_prompt_tokens=200, max_new_tokens=200)
    files, metrics = written_answers(templated, data=data, seed=0)
    text = load_text(Dataset(metrics={}, files=files))
    assert metrics["samples"] == 2 and metrics["skipped_unanswered"] == 1  # ASK has no assistant turn
    scored_next = [templated.decode(text.ids[t + 1 : t + 2]) for t in range(text.ids.numel() - 1) if text.scored[t]]
    answers = "".join(scored_next)
    per_sample = (
        "with open(path) as f:\n    lines = f.readlines()<|im_end|>\nsum(len(line.split()) for line in lines)"
        "<|im_end|>\n"
    )
    assert answers == per_sample * 2 and metrics["answer_tokens"] == len(scored_next)
    # a conversation longer than max_prompt_tokens + max_new_tokens is skipped
    small = data.model_copy(update={"max_prompt_tokens": 20, "max_new_tokens": 20})
    with pytest.raises(ValueError, match="no conversation of .* fits in max_prompt_tokens \\+ max_new_tokens = 40"):
        written_answers(templated, data=small, seed=0)


def _measured(accepted_by_prompt, categories, depth=3) -> Measured:
    per_prompt, walks = [], []
    for acc in accepted_by_prompt:
        one = curve_from_accepted(acc, depth, condition="default", temperature=0.0)
        per_prompt.append(tuple([len(acc), *(s * len(acc) for s in one.survival)]))
        walks.append(tuple(tuple(decode_walk(acc, k)) for k in range(depth + 1)))
    pooled = curve_from_accepted(
        [a for acc in accepted_by_prompt for a in acc], depth, condition="default", temperature=0.0
    )
    return Measured(
        curves=(MeasuredCurve(curve=pooled, per_prompt=tuple(per_prompt), walks=tuple(walks)),), categories=categories
    )


def test_a_categorys_curve_is_its_prompts_measured_alone():
    code = [[3, 3, 2, 3], [3, 2, 3, 3, 1]]
    chat = [[0, 1, 0], [1, 0, 0, 2]]
    measured = _measured([code[0], chat[0], code[1], chat[1]], ("code", "chat", "code", "chat"))
    curves = {c.category: c for c in category_curves(measured)}
    assert list(curves) == ["chat", "code"]
    for name, prompts in (("code", code), ("chat", chat)):
        alone = curve_from_accepted([a for acc in prompts for a in acc], 3, condition="default", temperature=0.0)
        assert curves[name].survival == pytest.approx(alone.survival) and curves[name].num_chains == alone.num_chains
        walks = [[decode_walk(acc, k) for k in range(4)] for acc in prompts]
        assert curves[name].decode_accept_len == pytest.approx(walk_accept_len(walks))
    choices = {c.category: (c.prompts, c.choice) for c in choose_by_category(measured, 0.05, pass_cost=None, seed=0)}
    assert choices["code"][0] == 2 and choices["code"][1].depth > choices["chat"][1].depth
    part = next(p for p in split_by_category(measured) if p.category == "code")
    assert choices["code"][1] == choose_depth(part.curve, 0.05, per_prompt=part.per_prompt, walks=part.walks, seed=0)
    assert category_curves(_measured([code[0]], ())) == ()
    with pytest.raises(ValueError, match="1 prompt categories for 2 measured prompts"):
        split_by_category(_measured([code[0], chat[0]], ("a",)))
    # a diagnostic condition's curve ran the first of the prompts (evaluation.diagnostic_prompts)
    fewer = _measured([code[0], chat[0]], ())
    both = Measured(curves=(*measured.curves, *fewer.curves), categories=measured.categories)
    parts = {p.category: p for p in split_by_category(both, 1)}
    assert {c: p.curve.num_chains for c, p in parts.items()} == {"code": len(code[0]), "chat": len(chat[0])}
