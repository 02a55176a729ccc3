"""Validation against reality: the real engine timed at every depth, beside the prediction."""

from __future__ import annotations

import pytest
import torch

from pipeline.core import contracts as c
from pipeline.core import tree_contracts as tc
from pipeline.core.choice import choose_depth
from pipeline.core.model_settings import Eagle3DrafterSpec
from pipeline.core.settings import Evaluation, Validation
from pipeline.core.types import Curve
from workers.decoding.chain import generate
from workers.drafters.standalone.proposer import ModelProposer
from workers.jobs.run import run_job
from workers.measure.speedup import engine_speedups

EVAL = Evaluation(
    max_depth=3,
    temperatures=[0.0],
    num_prompts=4,
    prompt_len=20,
    continuation_len=8,
    corpus="stdlib",
    conditions=["default"],
    long_context_len=64,
)
VALIDATION = Validation(num_prompts=3, new_tokens=17, repeats=1, warmup_prompts=1, tolerance=0.05)


def test_depth_zero_is_plain_decoding_and_is_timed(tiny_target):
    from workers.measure.curves import continue_text

    target, tokenizer, _ = tiny_target
    prompt = torch.tensor([[tokenizer.bos_token_id] + tokenizer("import os\n", add_special_tokens=False)["input_ids"]])
    timing: dict = {}
    out, accepted = generate(target, None, prompt, max_new=12, depth=0, temperature=0.0, timing=timing)
    assert out == continue_text(target, prompt, 12, 0.0, None)[0, prompt.shape[1] :].tolist()
    assert accepted == [0] * 11 and timing["tokens"] == 11 and timing["passes"] == 11 and timing["decode_s"] > 0
    with pytest.raises(ValueError, match="depth must be >= 0"):
        generate(target, None, prompt, max_new=4, depth=-1, temperature=0.0)


def test_identical_draft_model_emits_k_plus_one_decode_accept_len(tiny_target):
    """The target drafting for itself accepts every draft: the engine's accept_len is exactly k + 1."""
    target, tokenizer, _ = tiny_target
    result = engine_speedups(
        target=target,
        proposer=ModelProposer(target),
        tokenizer=tokenizer,
        evaluation=EVAL,
        validation=VALIDATION,
        seed=0,
    )
    assert result.engine_accept_len == (1.0, 2.0, 3.0, 4.0)
    assert result.greedy_mismatches == 0
    assert result.measured_speedup[0] == 1.0
    assert all(t > 0 for t in result.tokens_per_s)
    # 3 prompts x 16 tokens after the first; deeper chains overshoot max_new by at most k tokens
    assert result.tokens[0] == 48 and all(48 <= t <= 48 + 3 * k for k, t in enumerate(result.tokens))
    # by default the engine decodes as deep as the chains were measured
    default = engine_speedups(
        target=target,
        proposer=ModelProposer(target),
        tokenizer=tokenizer,
        evaluation=EVAL,
        validation=VALIDATION.model_copy(update={"new_tokens": None}),
        seed=0,
    )
    assert default.tokens[0] == 3 * (EVAL.continuation_len - 1) and default.engine_accept_len[2] == 3.0


def test_measure_speedup_job_compares_the_chosen_depth_with_the_best_measured(tiny_target, tiny_drafters):
    target, tokenizer, target_files = tiny_target
    _, drafter_files = tiny_drafters["post"]
    curve = Curve(
        condition="default",
        temperature=0.0,
        num_chains=10,
        cond_accept=(0.5, 0.5, 0.5),
        survival=(0.5, 0.25, 0.125),
        accept_len=(1.0, 1.5, 1.75, 1.875),
    )
    choice = choose_depth(curve, 0.1)
    selected = c.Selected(choice=choice, hardware="cpu 2t x1 float32", condition="default", temperature=0.0)
    config = c.MeasureSpeedupConfig(
        seed=0,
        device="cpu",
        target=c.TargetRef(name="t"),
        drafter=Eagle3DrafterSpec(name="d", norm="post"),
        evaluation=EVAL,
        validation=VALIDATION.model_copy(update={"compare_hf": True}),
        num_cpus=2,
        num_gpus=0,
    )
    inputs = {
        "target": c.Trained(metrics={}, files=target_files),
        "drafter": c.Trained(family="eagle3", metrics={}, files=drafter_files),
        "depth": selected,
    }
    check = run_job("measure_speedup", config, inputs, num_cpus=2, num_gpus=0).speedup_check
    tps = check.tokens_per_s
    assert len(tps) == 4 and check.predicted_speedup == choice.speedups
    assert check.chosen_depth == choice.depth and tps[check.best_measured_depth] == max(tps)
    assert check.chosen_vs_best == pytest.approx(tps[choice.depth] / max(tps))
    assert check.passed == (check.chosen_vs_best >= 0.95) == (check.problems == ())
    assert check.greedy_mismatches == 0 and check.engine_accept_len[0] == 1.0
    assert all(a >= 1.0 for a in check.engine_accept_len)
    assert [r.name for r in check.hf_runs] == ["generate"]  # HF cannot draft with an EAGLE head

    # costs timed elsewhere (here: with another thread count) cannot validate this engine's speed
    elsewhere = {**inputs, "depth": selected.model_copy(update={"hardware": "cpu 1t x1 float32"})}
    moved = run_job("measure_speedup", config, elsewhere, num_cpus=2, num_gpus=0).speedup_check
    assert not moved.passed and any("timed on cpu 1t" in p for p in moved.problems)

    wrong = {**inputs, "depth": selected.model_copy(update={"temperature": 1.0})}
    with pytest.raises(ValueError, match="another condition or temperature"):
        run_job("measure_speedup", config, wrong, num_cpus=2, num_gpus=0)

    with pytest.raises(TypeError, match="config must be MeasureSpeedupConfig"):  # the contract is checked
        run_job("measure_speedup", selected, inputs, num_cpus=2, num_gpus=0)


def test_the_decode_walk_over_measured_chains_is_what_the_engine_does(tiny_target, tiny_drafters):
    """At temperature 0 the engine's accepted counts pass by pass are the walk over the measured chains."""
    from pipeline.core.acceptance import decode_walk
    from workers.drafters.chain.drafting import draft_all_chains
    from workers.drafters.chain.proposer import ChainProposer
    from workers.measure.curves import continue_text, verify_chains
    from workers.models.features import target_pass

    target, tokenizer, _ = tiny_target
    drafter, _ = tiny_drafters["post"]
    K, n_cont = 4, 24
    prompt = torch.tensor(
        [[tokenizer.bos_token_id] + tokenizer("class Reader:\n    def", add_special_tokens=False)["input_ids"]]
    )
    p_len = prompt.shape[1]
    seq = continue_text(target, prompt, n_cont + K, 0.0, None)
    starts = list(range(p_len - 1, p_len - 1 + n_cont))
    streams, _ = target_pass(target, seq, drafter.cfg.capture_layers)
    drafts, _, _, _ = draft_all_chains(drafter, seq, streams, K, 0.0, None, starts)
    ok = (verify_chains(target, seq, starts, drafts).argmax(-1) == drafts).int()
    accepted = ok.cumprod(dim=1).sum(dim=1).tolist()
    for k in range(K + 1):
        _, engine = generate(target, ChainProposer(drafter), prompt, max_new=n_cont + 1, depth=k, temperature=0.0)
        walk, c = [], 0
        while c < n_cont:
            walk.append(min(accepted[c], k))
            c += walk[-1] + 1
        assert engine == walk, k
        assert decode_walk(accepted, k) == (sum(walk) + len(walk), len(walk))


def test_hf_generate_and_assisted_generation_are_timed_on_the_same_prompts(tiny_target):
    """The target as its own HF assistant: assisted generation must decode what plain generate does."""
    from pipeline.core.files import cached_dir
    from pipeline.core.model_settings import StandaloneDrafterSpec
    from pipeline.report.plots import engine_tables

    _, _, target_files = tiny_target
    folder = str(cached_dir(target_files))
    curve = Curve(
        condition="default",
        temperature=0.0,
        num_chains=10,
        cond_accept=(0.9, 0.9, 0.9),
        survival=(0.9, 0.81, 0.729),
        accept_len=(1.0, 1.9, 2.71, 3.439),
    )
    selected = c.Selected(
        choice=choose_depth(curve, 0.5), hardware="cpu 2t x1 float32", condition="default", temperature=0.0
    )
    config = c.MeasureSpeedupConfig(
        seed=0,
        device="cpu",
        target=c.TargetRef(name="t"),
        drafter=StandaloneDrafterSpec(name="self", kind="standalone", hf=folder),
        evaluation=EVAL,
        validation=VALIDATION.model_copy(update={"compare_hf": True}),
        num_cpus=2,
        num_gpus=0,
    )
    inputs = {"target": c.Trained(metrics={}, files=target_files), "depth": selected}
    check = run_job("measure_speedup", config, inputs, num_cpus=2, num_gpus=0).speedup_check
    names = [r.name for r in check.hf_runs]
    assert names == ["generate", "assisted k=1", "assisted k=2", "assisted k=3", "assisted (HF defaults)"]
    assert check.hf_runs[0].speedup == 1.0 and all(r.tokens_per_s > 0 for r in check.hf_runs)
    assert all(r.mismatches == 0 for r in check.hf_runs)  # lossless on HF's engine too
    assert [r.num_assistant_tokens for r in check.hf_runs[1:]] == [1, 2, 3, 20]
    assert check.hf_runs[-1].confidence_threshold == 0.4 and check.hf_runs[1].confidence_threshold == 0.0
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(engine_tables([("t", "self", check)]))
    text = console.export_text()
    assert "HF assisted k=2" in text and "specfleet engine, chosen k=" in text


def test_hf_generate_decodes_every_token_whatever_the_models_own_generation_config_says(tiny_target):
    """A model's generation config (its EOS, a repetition penalty) must not change what is timed."""
    from workers.decoding.hf_generate import time_hf

    target, tokenizer, _ = tiny_target
    prompt = torch.tensor([tokenizer.bos_token_id] + tokenizer("import os\n", add_special_tokens=False)["input_ids"])
    plain, _ = generate(target, None, prompt[None], max_new=12, depth=0, temperature=0.0)
    own = target.generation_config
    target.generation_config = own.__class__(eos_token_id=plain[1], repetition_penalty=3.0)
    try:
        run = time_hf(target, [prompt, prompt], new_tokens=12, temperature=0.0, pad=0, seed=0, reference=[plain, plain])
        assert [list(o) for o in run.outputs] == [plain, plain] and run.mismatches == 0 and run.tokens_per_s > 0
        assert target.generation_config.eos_token_id == plain[1]  # the model's own config is given back
    finally:
        target.generation_config = own


def test_measure_speedup_runs_the_chosen_tree_its_neighbours_and_the_chain(tiny_target, tiny_drafters):
    from pipeline.core.tree_choice import choose_tree
    from pipeline.core.types import CostProfile

    target, tokenizer, target_files = tiny_target
    _, drafter_files = tiny_drafters["post"]
    paths = [[(0, 0, 1), (1, 0), (0,), (0, 1, 0), (2,), (0, 0, 0)]] * 4
    cost = CostProfile(
        hardware="cpu 2t x1 float32",
        draft_ms=0.1,
        decode_ms=1.0,
        verify_ms=1.0,
        tree_verify_ms_by_batch=(tuple(1.0 + 0.01 * m for m in range(9)),),
        tree_draft_ms_by_batch=((0.1,) * 8,),
    )
    curve = Curve(
        condition="default",
        temperature=0.0,
        num_chains=10,
        cond_accept=(0.5, 0.5, 0.5),
        survival=(0.5, 0.25, 0.125),
        accept_len=(1.0, 1.5, 1.75, 1.875),
    )
    choice = choose_depth(curve, 0.1)
    tree = choose_tree(paths, cost, max_depth=3, topk=3, chain_depth=choice.depth, chain_tokens=choice.tokens_per_pass)
    selected = c.Selected(choice=choice, hardware="cpu 2t x1 float32", condition="default", temperature=0.0, tree=tree)
    config = c.MeasureSpeedupConfig(
        seed=0,
        device="cpu",
        target=c.TargetRef(name="t"),
        drafter=Eagle3DrafterSpec(name="d", norm="post"),
        evaluation=EVAL,
        validation=VALIDATION,
        num_cpus=2,
        num_gpus=0,
    )
    inputs = {
        "target": c.Trained(metrics={}, files=target_files),
        "drafter": c.Trained(family="eagle3", metrics={}, files=drafter_files),
        "depth": selected,
    }
    check = run_job("measure_speedup", config, inputs, num_cpus=2, num_gpus=0).speedup_check
    trees = check.tree
    n = len(tree.tree)
    assert trees.trees[0] == tree.tree and sorted(len(t) for t in trees.trees[1:]) == [
        m for m in (n - 2, n - 1, n + 1, n + 2) if 1 <= m <= 8 and tree.candidates[m].tree != tree.tree
    ]
    assert trees.greedy_mismatches == 0 and trees.chain_depth == 2
    assert len(trees.tokens_per_s) == len(trees.trees) == len(trees.predicted_speedup)
    assert trees.measured_speedup[0] == pytest.approx(trees.tokens_per_s[0] / trees.plain_tokens_per_s)
    assert all(1.0 <= a <= len(t) + 1 for a, t in zip(trees.engine_accept_len, trees.trees))
    best = max(max(trees.tokens_per_s), trees.chain_tokens_per_s)
    assert (tree.served and trees.tokens_per_s[0] < 0.95 * best) == any("chosen tree" in p for p in check.problems)


def _timed_trees(chosen_tokens_per_s: float, mismatches: int = 0) -> c.TreeCheck:
    return c.TreeCheck(
        trees=(((0,),), ((0,), (0, 0))),
        tokens_per_s=(chosen_tokens_per_s, 30.0),
        engine_accept_len=(1.4, 1.6),
        decode_accept_len=(1.5, 1.8),
        predicted_speedup=(1.2, 1.3),
        measured_speedup=(chosen_tokens_per_s / 25.0, 1.2),
        plain_tokens_per_s=25.0,
        chain_depth=2,
        chain_tokens_per_s=32.0,
        chain_predicted_speedup=1.3,
        greedy_mismatches=mismatches,
    )


def test_a_tree_the_chain_beats_is_timed_but_not_held_to_the_bar_and_a_served_one_is():
    """Serving runs the chain when the chain is predicted to win, so a slow unserved tree fails nothing;
    a served tree below (1 - tolerance) of the best shape fails, and wrong output fails either way."""
    from pipeline.core.verdict import tree_problems as _tree_problems

    slow = _timed_trees(29.0)  # 90.6% of the chain's 32 tokens/s
    assert _tree_problems(slow, 0.05, served=False) == ()
    assert any("reaches 90.6% of the best" in p for p in _tree_problems(slow, 0.05, served=True))
    assert _tree_problems(_timed_trees(31.0), 0.05, served=True) == ()  # 96.9%: within the tolerance
    assert any("decoded differently" in p for p in _tree_problems(_timed_trees(31.0, mismatches=2), 0.05, served=False))


def test_a_tree_is_served_only_when_predicted_to_beat_the_chain_at_every_batch_size():
    candidates = (
        tc.TreeCandidate(tree=(), decode_accept_len=1.0, speedups=(1.0, 1.0)),
        tc.TreeCandidate(tree=((0,),), decode_accept_len=1.5, speedups=(1.2, 1.1)),
        tc.TreeCandidate(tree=((0,), (1,)), decode_accept_len=1.7, speedups=(1.3, 1.0)),
    )

    def choice(n: int, chain: float, budgets: dict[int, int]) -> tc.TreeChoice:
        return tc.TreeChoice(
            tree=candidates[n].tree,
            decode_accept_len=candidates[n].decode_accept_len,
            speedup=candidates[n].speedups[0],
            best_point=n,
            chain_depth=1,
            chain_decode_accept_len=1.5,
            chain_speedup=chain,
            candidates=candidates,
            batch_budgets=budgets,
            chain_speedups=(chain, chain),
        )

    assert choice(2, 1.25, {1: 2, 8: 2}).served
    assert not choice(2, 1.30, {1: 2, 8: 2}).served  # level with the chain: the chain is served
    assert not choice(2, 1.25, {1: 2, 8: 1}).served  # batch size 8 chose a smaller tree
    assert not choice(0, 0.90, {1: 0, 8: 0}).served  # drafts nothing
    # a top-1 "tree" is a chain, whose depth the depth choice weighed on the chain engine's pass costs
    # (families.yaml's vanilla MTP head: a 1-token tree beside the chosen k = 2, measured 8.6% slower)
    assert not choice(1, 1.10, {1: 1, 8: 1}).served
