"""Acceptance-versus-depth measurement: many chains per prompt, one target pass per chain.

For each held-out prompt the target first continues the text itself (greedy at temperature
0, sampled otherwise), so every chain starts right after a token the target emitted, as in
real decoding. A chain starting at position c drafts `max_depth` tokens; ONE target pass over
prefix + drafts scores all of them, which gives accept_len(k) for every k <= max_depth.
Each evaluation condition (prompt format or drafter noise) and temperature gives one curve;
EAGLE drafters also yield drift diagnostics from the same drafting passes.

The drafter drafts `max_depth` tokens for all chains of a prompt at once; a test holds this
equal to drafting each chain incrementally with a KV cache. From the verify pass come
`cond_accept[j]`, `survival[j]` and `accept_len(k) = 1 + sum_{j<=k} survival[j]`, pooled over
chains (pipeline/core/acceptance.py). At temperature 0 they count greedy matches; above 0 they
record the exact expected acceptance sum_x min(p, q) along the drafted path. How drafts are
drawn above 0 is the spec's `evaluation.draft_sampling` (workers/decoding/sampling.py): from the
drafter's q (`sampled`), or its argmax verified as if q were one-hot (`greedy`, what vLLM does
by default), where a draft x is kept with probability p(x). The engine drafts and verifies the
same way, so validation measures the rule the curve assumed; both rules keep the target's
distribution exactly.

Each curve also gets `decode_accept_len(k)`, the tokens per target pass of a decoder walking the
measured chains (pipeline/core/acceptance.py); for a DFlash drafter run with `block_drafting: depth`
each smaller depth's walk is over chains drafted (and verified) at that depth, as the engine drafts
them, while the survival curve stays the deepest chains': it is stored beside `accept_len` in the database's
`curves` table and logged to MLflow with `step = depth`. The drift diagnostics
(workers/measure/diagnostics.py) go to the `diagnostics` table beside the curve and to MLflow as
`<name>/<condition>/T<temperature>`, also with `step = depth`, and `specfleet report` draws them.
(`draft_attn` was added after the runs reported under experiments/results/.)
"""

from __future__ import annotations

import copy
import dataclasses

import torch

from pipeline.core.acceptance import curve_from_accepted, curve_from_sampled, decode_walk, walk_accept_len
from pipeline.core.trees import rank_path
from workers.data.prompts import build_prompts
from workers.decoding.sampling import drafting_temperature, one_hot_q, sample
from workers.measure.noise import Noise, parse_noise
from workers.models.features import cached_forward_states, extend_logits


@torch.no_grad()
def continue_text(target, ids: torch.Tensor, n_new: int, temperature: float, gen: torch.Generator | None):
    """The target's own continuation, with its KV cache. ids: [B, P] -> [B, P + n_new]."""
    logits, cache, _ = cached_forward_states(target, ids)
    seq = ids
    for _ in range(n_new):
        nxt = sample(logits[:, -1].float(), temperature, gen)  # [B]
        seq = torch.cat([seq, nxt[:, None]], dim=1)
        logits, cache, _ = cached_forward_states(target, nxt[:, None], cache)
    return seq


@torch.no_grad()
def verify_chains(
    target, seq: torch.Tensor, starts: list[int], drafts: torch.Tensor, max_tokens: int = 16384, max_logits: int = 2**28
):
    """ONE target pass per chain over seq[:c+2] + its drafts. seq: [1, L], drafts: [N, depth].

    Every chain's row begins with seq[:starts[0] + 1] (the prompt, at least): that prefix is run
    once and its KV cache shared, so each chain costs only its own tokens after it (on a real
    target with a long prompt, most of the work). The rows after the prefix are right-padded (the
    attention mask keeps the padding out). A batch of chains stays within max_tokens tokens and
    max_logits logits (every position's are computed: 1 GiB of float32 by default, whatever the
    vocabulary). starts must increase. Returns target logits [N, depth, V]: entry j scores draft j+1.
    """
    if any(b <= a for a, b in zip(starts, starts[1:])):
        raise ValueError("chain starts must increase")
    depth = drafts.shape[-1]
    vocab = target.get_output_embeddings().weight.shape[0]
    base = starts[0] + 1
    _, prefix, _ = cached_forward_states(target, seq[:, :base])
    out = []
    lo = 0
    while lo < len(starts):
        hi = lo + 1  # chains in one batch: their rows (prefix included) within max_tokens
        while (
            hi < len(starts)
            and (hi - lo + 1) * (starts[hi] + 2 + depth) <= max_tokens
            and (hi - lo + 1) * (starts[hi] + 2 + depth - base) * vocab <= max_logits
        ):
            hi += 1
        rows = [torch.cat([seq[0, base : starts[n] + 2], drafts[n]]) for n in range(lo, hi)]
        width = max(r.numel() for r in rows)
        ids = torch.zeros(hi - lo, width, dtype=torch.long, device=seq.device)
        mask = torch.zeros(hi - lo, base + width, dtype=torch.long, device=seq.device)
        mask[:, :base] = 1
        for r, row in enumerate(rows):
            ids[r, : row.numel()], mask[r, base : base + row.numel()] = row, 1
        cache = copy.deepcopy(prefix)
        cache.batch_repeat_interleave(hi - lo)
        positions = torch.arange(base, base + width, device=seq.device).expand(hi - lo, -1)
        logits = extend_logits(target, ids, mask, positions, cache)  # [n, width, V]
        # row r's last depth + 1 tokens are its last real token and its drafts: the first depth score drafts
        ends = torch.tensor([row.numel() for row in rows], device=seq.device)
        at = ends[:, None] - (depth + 1) + torch.arange(depth, device=seq.device)[None, :]  # [n, depth]
        out.append(logits.gather(1, at[..., None].expand(-1, -1, logits.shape[-1])).float())
        lo = hi
    return torch.cat(out)


def measure_curves(*, target, drafter, family, tokenizer, evaluation, seed: int):
    """One (Curve, diagnostics rows, per-prompt survival sums, per-prompt decode walks, per-prompt rank
    paths) per (condition, temperature). A rank path (pipeline/core/trees.py) holds, for one chain
    start, the rank of the target's own token in the drafter's proposals at each step, up to the
    first past evaluation.tree_topk; none when tree_topk is 0. `family` (workers/drafters/registry.py)
    drafts the chains of `drafter`; `evaluation` is the spec's evaluation section."""
    results = []
    for index, condition in enumerate(evaluation.conditions):
        prompts = build_prompts(
            tokenizer,
            corpus=evaluation.corpus,
            condition=condition,
            num_prompts=evaluation.prompts_under(index),
            prompt_len=evaluation.prompt_len,
            long_context_len=evaluation.long_context_len,
            seed=seed,
            answer_prefix=evaluation.answer_prefix,
            prompts_file=evaluation.prompts,
        )
        for temp in evaluation.temperatures:
            gen = torch.Generator().manual_seed(seed)
            chains = family.chains(drafter, target, evaluation.max_depth)
            results.append(_measure(target, chains, prompts, evaluation, condition, temp, gen))
    return results


def _measure(target, chains, prompts, evaluation, condition, temp, gen):
    depth, n_cont = evaluation.max_depth, evaluation.continuation_len
    device = next(target.parameters()).device
    noise_spec = parse_noise(condition)
    noise = Noise(*noise_spec, gen) if noise_spec else None
    # the ranking passes draw their own noise, so the chains' draws stay what they were without them
    rank_noise = Noise(*noise_spec, torch.Generator().manual_seed(0)) if noise_spec else None
    rank_paths = []  # per prompt, one rank path per chain start
    accepted, ratios, alphas = [], [], []
    per_prompt = []  # [chains, sum of survival[1..K]] per prompt: what a bootstrap over prompts resamples
    walks = []  # per prompt, [tokens, passes] of decoding at k = 0..K over its chain starts (decode_walk)
    walk_seed = int(torch.randint(2**31, (), generator=gen)) if temp > 0 else None
    walk_gen = torch.Generator().manual_seed(walk_seed) if temp > 0 else None
    # per-depth chains (a DFlash drafter run on blocks of depth + 1) draw from their own generator, so
    # the text every prompt continues into is the same whichever way the drafter is run
    depth_gen = torch.Generator().manual_seed(walk_seed + 1) if temp > 0 else None
    draft_temp = drafting_temperature(temp, evaluation.draft_sampling)
    for prompt in prompts:
        p_len = prompt.numel()
        seq = continue_text(target, prompt[None].to(device), n_cont + depth, temp, gen)  # [1, P + G + K]
        starts = list(range(p_len - 1, p_len - 1 + n_cont))  # chain c starts after target token c+1
        chain_drafts, q_logits = chains.draft(seq, starts, draft_temp, gen, noise)  # [N, K], [N, K, V]
        p_logits = verify_chains(target, seq, starts, chain_drafts)  # [N, K, V]
        if evaluation.tree_topk:
            ranks = chains.ranks(seq, starts, rank_noise).tolist()
            rank_paths.append([rank_path(r, evaluation.tree_topk) for r in ranks])
        if temp == 0:
            mine = _greedy_accepted(p_logits, chain_drafts)
            accepted += mine
            one = curve_from_accepted(mine, depth, condition=condition, temperature=temp)
            per_prompt.append([len(mine), *(x * len(mine) for x in one.survival)])
            draws = [mine]
        else:
            # q as the verifier sees it: the drafter's distribution, or one-hot on greedy drafts
            my_ratios, my_alphas = _sampled_ratios(p_logits, chain_drafts, q_logits, temp, draft_temp)
            alphas += my_alphas
            ratios += my_ratios
            one = curve_from_sampled(my_ratios, my_alphas, condition=condition, temperature=temp)
            per_prompt.append([len(my_alphas), *(x * len(my_alphas) for x in one.survival)])
            # what a decoder's accept/reject would keep, WALK_DRAWS times; an approximation at T > 0: the
            # text after a rejection is the target's sample here, a residual draw in a decoder
            draws = _decoder_draws(my_ratios, walk_gen)
        kept = {k: draws for k in range(depth + 1)}
        if chains.per_depth:  # a smaller depth drafts chains of its own: walk those
            for k in range(1, depth):
                kept[k] = _kept_at_depth(target, chains, seq, starts, k, temp, draft_temp, depth_gen, walk_gen)
        walks.append([[sum(x) for x in zip(*(decode_walk(d, k) for d in kept[k]))] for k in range(depth + 1)])
    if temp == 0:
        curve = curve_from_accepted(accepted, depth, condition=condition, temperature=temp)
    else:
        curve = curve_from_sampled(ratios, alphas, condition=condition, temperature=temp)
    curve = dataclasses.replace(curve, decode_accept_len=tuple(walk_accept_len(walks)))
    return curve, chains.diagnostics(), per_prompt, walks, rank_paths


WALK_DRAWS = 8


def _greedy_accepted(p_logits: torch.Tensor, drafts: torch.Tensor) -> list[int]:
    """Per chain, how many drafts greedy verification keeps. p_logits: [N, K, V], drafts: [N, K]"""
    return (p_logits.argmax(-1) == drafts).int().cumprod(dim=1).sum(dim=1).tolist()


def _sampled_ratios(p_logits, drafts, q_logits, temp: float, draft_temp: float):
    """Per chain and draft, min(1, p/q) at the drafted token and alpha = sum_x min(p, q), with q as the
    verifier sees it (the drafter's, or one-hot on greedy drafts). -> (ratios, alphas) as lists [N][K]"""
    q = torch.softmax(q_logits / temp, dim=-1) if draft_temp > 0 else one_hot_q(drafts, q_logits.shape[-1])
    p = torch.softmax(p_logits / temp, dim=-1)
    alphas = torch.minimum(p, q).sum(-1).clamp(max=1.0).tolist()
    picked = drafts[..., None]
    ratios = (p.gather(-1, picked) / q.gather(-1, picked)).squeeze(-1).clamp(max=1.0).tolist()
    return ratios, alphas


def _kept_at_depth(target, chains, seq, starts, k: int, temp: float, draft_temp: float, gen, walk_gen):
    """The drafts a decoder keeps of each chain drafted at depth k on its own (`chains.per_depth`),
    verified in a target pass of their own: one list at T = 0, WALK_DRAWS draws above."""
    drafts, q_logits = chains.draft_depth(k, draft_temp, gen)
    p_logits = verify_chains(target, seq, starts, drafts)
    if temp == 0:
        return [_greedy_accepted(p_logits, drafts)]
    return _decoder_draws(_sampled_ratios(p_logits, drafts, q_logits, temp, draft_temp)[0], walk_gen)


def _decoder_draws(ratios: list[list[float]], gen) -> list[list[int]]:
    """WALK_DRAWS draws of what a decoder's accept/reject keeps of each chain: one list of counts each."""
    return [[_accepted_draws(r, gen) for r in ratios] for _ in range(WALK_DRAWS)]


def _accepted_draws(ratios: list[float], gen) -> int:
    """Drafts a decoder keeps: draft j survives with probability ratios[j] while all before it did."""
    n = 0
    while n < len(ratios) and float(torch.rand((), generator=gen)) < ratios[n]:
        n += 1
    return n
