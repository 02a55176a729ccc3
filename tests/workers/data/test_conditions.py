"""Chat corpus, evaluation conditions, drift diagnostics and standalone drafters, run small."""

from __future__ import annotations

import pytest
import torch

from pipeline.core.contracts import TargetRef, TrainTargetConfig
from pipeline.core.model_settings import Eagle3DrafterSpec, StandaloneDrafterSpec
from pipeline.core.settings import CostTiming, Evaluation, TimedPrompts
from workers.data.chat import ASSISTANT, END, SYSTEM, USER, render, samples
from workers.data.prompts import build_prompts
from workers.jobs.run import run_job

CHAT_TARGET = TrainTargetConfig(
    builtin={
        "layers": 4,
        "hidden_size": 64,
        "heads": 4,
        "intermediate_size": 128,
        "vocab_size": 400,
        "corpus": "chat",
        "train": {"steps": 30, "lr": 3e-3, "batch_size": 8, "seq_len": 64},
    },
    seed=0,
    device="cpu",
)
TARGET = TargetRef(name="chat", dtype="float32")
CONDITIONS = [
    "template+bos",
    "template_no_bos",
    "no_template",
    "no_template_no_bos",
    "long_context",
    "hidden_noise@0",
    "hidden_noise@2",
    "embedding_noise@0.5",
]
CONDITION_SPECS = CONDITIONS[:5] + [
    {"noise": "hidden", "a": 0},
    {"noise": "hidden", "a": 2},
    {"noise": "embedding", "a": 0.5},
]
EVAL = Evaluation(
    max_depth=3,
    temperatures=[0.0, 1.0],
    num_prompts=3,
    prompt_len=40,
    continuation_len=6,
    corpus="chat",
    conditions=CONDITION_SPECS,
    long_context_len=160,
)


@pytest.fixture(scope="module")
def chat_target():
    return run_job("train_target", CHAT_TARGET, {}, num_cpus=2, num_gpus=0)


def _run(kind: str, inputs: dict, **fields):
    from pipeline.core.kinds import KINDS

    config = KINDS[kind].config
    placement = {"num_cpus": 2, "num_gpus": 0} if kind == "profile_cost" else {}
    return run_job(
        kind, config(seed=0, device="cpu", target=TARGET, **placement, **fields), inputs, num_cpus=2, num_gpus=0
    )


@pytest.mark.slow
def test_chat_samples_are_split_and_templated():
    train, held = samples("train"), samples("heldout")
    assert len(train) > 1000 and len(held) > 100
    text = render(train[0])
    assert text.startswith(SYSTEM) and USER in text and ASSISTANT in text and text.endswith(END)
    assert SYSTEM not in render(train[0], template=False)


def test_prompt_formats(chat_target):
    from pipeline.core.files import cached_dir
    from workers.models.loading import load_model

    _, tok = load_model(folder=cached_dir(chat_target.files), device=torch.device("cpu"), dtype=torch.float32)
    chat_ids = {tok.convert_tokens_to_ids(t) for t in (SYSTEM, USER, ASSISTANT)}
    kw = dict(corpus="chat", num_prompts=4, prompt_len=40, long_context_len=160, seed=0)
    for condition, (template, bos) in {
        "template+bos": (True, True),
        "template_no_bos": (True, False),
        "no_template": (False, True),
        "no_template_no_bos": (False, False),
    }.items():
        for p in build_prompts(tok, condition=condition, **kw):
            assert (int(p[0]) == tok.bos_token_id) == bos, condition
            assert bool(chat_ids & set(p.tolist())) == template, condition
            assert p.numel() <= 40
    for p in build_prompts(tok, condition="long_context", **kw):
        assert p.numel() >= 160 and int(p[0]) == tok.bos_token_id
    same = build_prompts(tok, condition="hidden_noise@0.5", **kw)
    assert all(torch.equal(a, b) for a, b in zip(same, build_prompts(tok, condition="default", **kw)))


def test_every_condition_gives_curves_and_diagnostics(chat_target):
    drafter = Eagle3DrafterSpec(
        name="d",
        norm="post",
        fc_norm=True,
        fusion="tri",
        attention="gated",
        draft_vocab=200,
        train={"ttt_depth": 2, "steps": 8, "lr": 3e-3, "batch_size": 8, "seq_len": 64, "corpus": "chat"},
    )
    trained = _run("train_drafter", {"target": chat_target}, drafter=drafter)
    assert trained.family == "eagle3"
    out = _run("measure_curve", {"target": chat_target, "drafter": trained}, drafter=drafter, evaluation=EVAL)
    keys = [(curve.condition, curve.temperature) for curve in (m.curve for m in out.curves)]
    assert keys == [(cond, t) for cond in CONDITIONS for t in (0.0, 1.0)]
    by_key = {(curve.condition, curve.temperature): curve for curve in (m.curve for m in out.curves)}
    # zero noise drafts exactly what no noise drafts
    assert by_key[("hidden_noise@0", 0.0)].accept_len == by_key[("template+bos", 0.0)].accept_len
    rows = out.diagnostics
    for name in ("sink_attn", "recent_attn", "draft_attn"):
        assert all(0.0 <= r.value <= 1.0 for r in rows if r.name == name)
    drafts = {r.depth: r.value for r in rows if r.name == "draft_attn" and r.condition == "template+bos"}
    assert drafts[1] == 0.0 and drafts[3] > 0.0  # the first step sees no drafts; later ones do
    assert all(r.value >= 0 for r in rows if r.name == "attn_entropy")
    assert {r.depth for r in rows if r.name == "rms"} == {1, 2, 3}
    assert {"rms_low", "rms_mid", "rms_high", "rms_fused"} <= {r.name for r in rows if r.depth == 0}


def test_standalone_drafter_trains_measures_and_profiles(chat_target):
    spec = StandaloneDrafterSpec(
        name="s",
        kind="standalone",
        builtin={
            "layers": 1,
            "hidden_size": 32,
            "heads": 2,
            "intermediate_size": 64,
            "train": {"steps": 10, "lr": 3e-3, "batch_size": 8, "seq_len": 64, "corpus": "chat"},
        },
    )
    trained = _run("train_drafter", {"target": chat_target}, drafter=spec)
    assert "config.json" in trained.files and trained.family == "standalone"
    evaluation = EVAL.model_copy(update={"conditions": ["template+bos"], "temperatures": [0.0, 1.0]})
    out = _run("measure_curve", {"target": chat_target, "drafter": trained}, drafter=spec, evaluation=evaluation)
    assert [curve.num_chains for curve in (m.curve for m in out.curves)] == [18, 18]
    assert out.diagnostics == ()  # no drift diagnostics: not EAGLE
    assert all(len(curve.decode_accept_len) == 4 for curve in (m.curve for m in out.curves))
    cost = _run(
        "profile_cost",
        {"target": chat_target, "drafter": trained},
        drafter=spec,
        cost=CostTiming(context_len=16, warmup=1, repeats=3),
        max_depth=3,
        prompts=TimedPrompts.of(evaluation),
    ).cost
    assert cost.draft_ms > 0
    assert len(cost.pass_ms) == 4 and all(p > 0 for p in cost.pass_ms)


def test_batched_standalone_chains_equal_the_engine_proposer():
    from transformers import LlamaConfig, LlamaForCausalLM

    from workers.drafters.standalone.chains import draft_chains_with_model
    from workers.drafters.standalone.proposer import ModelProposer

    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=50,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=4,
            initializer_range=0.3,
        )
    ).eval()
    seq = torch.randint(3, 50, (1, 20))
    starts = list(range(5, 14))
    drafts, _ = draft_chains_with_model(model, seq, starts, 4, 0.0, None)
    for n, start in enumerate(starts):
        proposer = ModelProposer(model)
        proposer.start(seq[0, : start + 2].tolist())
        assert proposer.propose(4, 0.0, None)[0] == drafts[n].tolist(), start
    gaps = [5, 9, 16]  # chain starts need not be neighbours
    sparse, _ = draft_chains_with_model(model, seq, gaps, 4, 0.0, None)
    assert [sparse[n].tolist() for n in range(3)] == [drafts[starts.index(c)].tolist() for c in gaps[:2]] + [
        engine_drafts(model, seq, 16)
    ]


def engine_drafts(model, seq, c):
    from workers.drafters.standalone.proposer import ModelProposer

    proposer = ModelProposer(model)
    proposer.start(seq[0, : c + 2].tolist())
    return proposer.propose(4, 0.0, None)[0]


def test_the_sink_is_where_the_target_parks_its_attention():
    """Keys whose target state carries a massive activation are the sink; key 0 on a target with none."""
    from workers.measure.diagnostics import sink_keys

    gen = torch.Generator().manual_seed(0)
    calm = [torch.randn(1, 12, 16, generator=gen) for _ in range(3)]
    assert sink_keys(calm, 11).tolist() == [True] + [False] * 10
    loud = [s.clone() for s in calm]
    loud[2][0, 4] *= 200.0  # the deepest stream's token 4 has a massive activation (a delimiter sink)
    loud[1][0, 0] *= 200.0  # and the middle stream's first token
    assert sink_keys(loud, 11).nonzero().flatten().tolist() == [0, 4]
    assert sink_keys(loud, 4).nonzero().flatten().tolist() == [0]  # only keys that exist count


def test_a_chat_prompt_can_end_where_the_assistant_turn_begins(chat_target):
    from transformers import AutoTokenizer

    from pipeline.core.files import cached_dir

    tok = AutoTokenizer.from_pretrained(cached_dir(chat_target.files))
    kw = dict(corpus="chat", num_prompts=3, prompt_len=96, long_context_len=200, seed=0)
    served = build_prompts(tok, condition="template+bos", answer_prefix=0, **kw)
    mid = build_prompts(tok, condition="template+bos", **kw)  # 4 tokens into the reference answer
    for a, b in zip(served, mid):
        assert tok.decode(a).endswith(ASSISTANT) and torch.equal(b[: a.numel()], a) and b.numel() == a.numel() + 4
