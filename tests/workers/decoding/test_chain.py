"""The speculative engine is lossless: greedy equals the target's decode, sampling keeps the
target's distribution (a wrong residual fails the test), and an identical drafter accepts all."""

from __future__ import annotations

import itertools

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import workers.decoding.chain as engine
from workers.decoding.chain import accept_drafts, generate
from workers.decoding.sampling import one_hot_q
from workers.drafters.chain.proposer import ChainProposer
from workers.drafters.dflash.model import drafter_from_target as dflash_from_target
from workers.drafters.dflash.proposer import BlockProposer
from workers.drafters.dflash.train import dflash_config_for
from workers.drafters.eagle3.model import drafter_from_target
from workers.drafters.eagle3.train import drafter_config_for
from workers.drafters.standalone.proposer import ModelProposer

V = 12  # a small vocabulary, so exact target distributions can be enumerated


def chi2_pvalue(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's chi-square test of observed counts against probabilities (cells merged below 5)."""
    n = counts.sum()
    expected = probs * n
    keep = expected >= 5
    obs = torch.cat([counts[keep], counts[~keep].sum()[None]]) if (~keep).any() else counts[keep]
    exp = torch.cat([expected[keep], expected[~keep].sum()[None]]) if (~keep).any() else expected[keep]
    stat = ((obs - exp) ** 2 / exp.clamp(min=1e-12)).sum()
    df = obs.numel() - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), stat.double() / 2))


def _sample_rounds(p_logits, q, n_samples, gen):
    """Run accept_drafts on fixed, context-free distributions; count tokens emitted at each slot."""
    k = q.shape[0]
    counts = torch.zeros(k + 1, V)
    for _ in range(n_samples):
        drafts = [int(torch.multinomial(q[j], 1, generator=gen)) for j in range(k)]
        n, nxt = accept_drafts(p_logits, drafts, q, 1.0, gen)
        for slot, tok in enumerate(drafts[:n] + [nxt]):
            counts[slot, tok] += 1
    return counts


def test_accept_rule_keeps_target_distribution_and_a_wrong_residual_is_caught(monkeypatch):
    gen = torch.Generator().manual_seed(0)
    p_logits = torch.randn(4, V, generator=gen) * 1.5  # target at slots 1..3 and the bonus slot
    q = torch.softmax(p_logits[:3] + torch.randn(3, V, generator=gen), dim=-1)  # a drafter that partly agrees
    p = torch.softmax(p_logits, dim=-1)
    counts = _sample_rounds(p_logits, q, 8000, gen)
    # context-free targets: whatever was accepted before, slot j must be distributed as p[j]
    for slot in range(4):
        assert counts[slot].sum() > 300, slot
        assert chi2_pvalue(counts[slot], p[slot]) > 1e-4, slot

    monkeypatch.setattr(engine, "residual_sample", lambda p_, q_, g: int(torch.multinomial(p_, 1, generator=g)))
    wrong = _sample_rounds(p_logits, q, 8000, torch.Generator().manual_seed(0))
    assert chi2_pvalue(wrong[0], p[0]) < 1e-4  # resampling from p instead of the residual is biased


def test_greedy_drafts_verified_one_hot_keep_the_target_distribution_at_any_temperature():
    """vLLM's default at T > 0: the drafter's argmax, verified as if q were one-hot on it. Verifying
    those drafts with the drafter's soft q instead (the sampled rule) is biased."""
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(2, V, generator=gen) * 1.5
    draft = int((logits[0] + torch.randn(V, generator=gen)).argmax())  # a drafter that partly agrees
    soft_q = torch.softmax(logits[:1] + torch.randn(1, V, generator=gen), dim=-1)
    for temperature in (0.7, 1.3):
        p = torch.softmax(logits / temperature, dim=-1)
        for q, lossless in ((one_hot_q(torch.tensor([draft]), V), True), (soft_q, False)):
            counts = torch.zeros(V)
            g = torch.Generator().manual_seed(2)
            for _ in range(6000):
                n, nxt = accept_drafts(logits, [draft], q, temperature, g)
                counts[draft if n else nxt] += 1
            assert (chi2_pvalue(counts, p[0]) > 1e-4) == lossless, (temperature, lossless)


def _tiny_llama(seed: int, vocab: int = V, layers: int = 4) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        initializer_range=0.3,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg).eval()


@torch.no_grad()
def _exact_joint(target, prompt, n_new, temperature: float = 1.0):
    """P(x_1..x_n | prompt) at a temperature, for every sequence of n_new tokens, by enumeration.
    -> [V] * n_new"""
    seqs = torch.tensor(list(itertools.product(range(V), repeat=n_new)))  # [V^n, n]
    ids = torch.cat([prompt.expand(seqs.shape[0], -1), seqs], dim=1)
    logp = torch.log_softmax(target(input_ids=ids).logits.float() / temperature, dim=-1)
    P = prompt.shape[1]
    total = sum(logp[:, P - 1 + i].gather(1, seqs[:, i : i + 1]).squeeze(1) for i in range(n_new))
    return total.exp().reshape([V] * n_new)


@pytest.mark.parametrize(
    "kind,temperature,draft_sampling",
    [
        ("eagle", 1.0, "sampled"),
        ("eagle", 0.7, "greedy"),
        ("model", 0.7, "sampled"),
        ("model", 0.7, "greedy"),
        ("block", 0.7, "sampled"),
    ],
)
@pytest.mark.slow
def test_sampled_decoding_matches_the_target_distribution(kind, temperature, draft_sampling):
    """Every proposer (the draft model's rejection path included; a DFlash block's drafts, each drawn
    from its own position's q in one pass), with both ways of drafting, at T = 1 and at another
    temperature."""
    target = _tiny_llama(0)
    if kind == "model":
        proposer = ModelProposer(_tiny_llama(1, layers=1))  # a draft model smaller than its target, as in use
    elif kind == "block":
        torch.manual_seed(2)
        cfg = dflash_config_for(target, layers=1, block_size=3, mask_token_id=V - 1)
        proposer = BlockProposer(dflash_from_target(target, cfg).eval())
    else:
        cfg = drafter_config_for(target, norm="pre", fc_norm=False, fusion="tri")
        torch.manual_seed(2)
        proposer = ChainProposer(drafter_from_target(target, cfg).eval())
    check_sampled_distribution(target, proposer, temperature=temperature, draft_sampling=draft_sampling)


def check_sampled_distribution(
    target, proposer, rounds: int = 1000, temperature: float = 1.0, draft_sampling: str = "sampled"
):
    """Sample 3 tokens `rounds` times at depth 2; they must follow the target's exact joint at that
    temperature."""
    prompt = torch.tensor([[1, 5, 3]])
    joint = _exact_joint(target, prompt, 3, temperature)
    gen = torch.Generator().manual_seed(7)
    counts = torch.zeros(V, V, V)
    passes = 0
    for _ in range(rounds):
        out, accepted = generate(
            target,
            proposer,
            prompt,
            max_new=3,
            depth=2,
            temperature=temperature,
            gen=gen,
            draft_sampling=draft_sampling,
        )
        counts[tuple(out)] += 1
        passes += len(accepted)
    # marginals of the 2nd and 3rd tokens (drafted, resampled or bonus) and the pair's joint
    assert chi2_pvalue(counts.sum((0, 2)), joint.sum((0, 2))) > 1e-4
    assert chi2_pvalue(counts.sum((0, 1)), joint.sum((0, 1))) > 1e-4
    assert chi2_pvalue(counts.sum(0).flatten(), joint.sum(0).flatten()) > 1e-4
    assert passes < rounds * 2  # some rounds emitted more than one token


def test_identical_drafter_accepts_every_draft_and_gets_the_bonus():
    target = _tiny_llama(0, vocab=40)
    prompt = torch.tensor([[1, 2, 3, 4]])
    for temperature in (0.0, 1.0):
        out, accepted = generate(
            target,
            ModelProposer(target),
            prompt,
            max_new=21,
            depth=4,
            temperature=temperature,
            gen=torch.Generator().manual_seed(3),
        )
        assert accepted == [4] * 4  # 1 prefill token + 4 passes x (4 drafts + bonus) = 21
        assert len(out) == 21


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_each_verification_is_handed_over_as_it_ran(temperature):
    """`on_round` gets every pass: its accepted counts are the engine's, its drafts and emitted tokens
    rebuild the output, and its final states give the target's own next-token logits after the
    anchor and the drafts before each position (recomputed here by a plain forward)."""
    target = _tiny_llama(0, vocab=40)
    cfg = drafter_config_for(target, norm="post", fc_norm=True, fusion="tri")
    torch.manual_seed(2)
    proposer = ChainProposer(drafter_from_target(target, cfg).eval())
    prompt = torch.tensor([[1, 2, 3, 4, 5]])
    rounds = []
    out, accepted = generate(
        target,
        proposer,
        prompt,
        max_new=30,
        depth=3,
        temperature=temperature,
        gen=torch.Generator().manual_seed(4),
        on_round=rounds.append,
    )
    assert [r.accepted for r in rounds] == accepted
    text = prompt[0].tolist() + [out[0]]
    for r in rounds:
        assert r.anchor == len(text) - 1  # the drafts follow the newest committed token
        assert len(r.drafts) == 3 and r.final.shape == (3, 32)
        with torch.no_grad():
            want = target(input_ids=torch.tensor([text + r.drafts[:-1]])).logits[0, r.anchor :]  # [3, V]
        assert torch.allclose(target.lm_head(r.final), want, atol=1e-4)
        text += r.drafts[: r.accepted] + [r.emitted]
    assert text[prompt.shape[1] :][:30] == out
    assert any(0 < n < 3 for n in accepted)  # partial acceptance was exercised
