"""Acceptance-versus-depth measurement: many chains per prompt, one target pass per chain.

For each held-out prompt the target first continues the text itself (greedy at temperature
0, sampled otherwise), so every chain starts right after a token the target emitted, as in
real decoding. A chain starting at position c drafts `max_depth` tokens; ONE target pass over
prefix + drafts scores all of them, which gives accept_len(k) for every k <= max_depth.
Each evaluation condition (prompt format or drafter noise) and temperature gives one curve;
EAGLE drafters also yield drift diagnostics from the same drafting passes.
"""
from __future__ import annotations

import torch

from pipeline.acceptance import curve_from_accepted, curve_from_sampled
from pipeline.types import Curve
from workers.diagnostics import DriftStats
from workers.features import cached_forward_states, target_pass
from workers.noise import Noise, parse_noise
from workers.prompts import build_prompts
from workers.sampling import sample


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
def draft_all_chains(drafter, seqs: torch.Tensor, streams, depth: int, temperature: float, gen, noise=None):
    """Draft `depth` tokens for a chain starting at every position, in `depth` drafter passes.

    seqs: [B, L]; streams: the target's captured states for seqs. Returns drafts [B, L-1, depth]
    (chain c's j-th draft at [:, c, j-1]), the drafter's target-vocabulary logits for them
    [B, L-1, depth, V], the StepOuts and the fused input. Chains that would run past the end
    of seqs hold meaningless entries; callers skip them.
    """
    g0 = drafter.fuse([s[:, :-1].to(drafter.fc.weight.dtype) for s in streams])
    outs = drafter.forward_steps(seqs[:, 1:], g0, depth, noise=noise,
                                 pick=lambda lg: sample(drafter.full_logits(lg.float()), temperature, gen))
    # step s at position i belongs to the chain that started at c = i - s: align on c
    drafts = torch.stack([torch.roll(o.picked, -s, dims=1) for s, o in enumerate(outs)], dim=2)
    logits = torch.stack([torch.roll(drafter.full_logits(o.logits.float()), -s, dims=1)
                          for s, o in enumerate(outs)], dim=2)
    return drafts, logits, outs, g0


@torch.no_grad()
def draft_chains_with_model(model, seq: torch.Tensor, starts: list[int], depth: int, temperature: float, gen):
    """A standalone draft model drafts every chain from its own KV cache. seq: [1, L].

    Returns drafts [1, L-1, depth] and target-vocabulary logits [1, L-1, depth, V] (filled at starts).
    """
    L, V = seq.shape[1], model.get_output_embeddings().weight.shape[0]
    drafts = torch.zeros(1, L - 1, depth, dtype=torch.long, device=seq.device)
    logits = torch.zeros(1, L - 1, depth, V, device=seq.device)
    prefix = torch.stack([seq[0, : starts[0] + 2]])
    out, cache, _ = cached_forward_states(model, prefix)
    for c in starts:  # one chain at a time: each extends the shared prefix cache, then drafts
        if c > starts[0]:
            out, cache, _ = cached_forward_states(model, seq[:, c + 1 : c + 2], cache)
        lg, chain_cache = out[:, -1].float(), cache
        for j in range(depth):
            tok = sample(lg, temperature, gen)
            drafts[0, c, j], logits[0, c, j] = tok[0], lg[0]
            if j < depth - 1:
                step, chain_cache, _ = cached_forward_states(model, tok[:, None], chain_cache)
                lg = step[:, -1].float()
        if depth > 1:  # the chain's drafts went into the shared cache: drop them before the next real token
            cache.crop(-(depth - 1))
    return drafts, logits


@torch.no_grad()
def verify_chains(target, seq: torch.Tensor, starts: list[int], drafts: torch.Tensor, batch_size: int = 64):
    """ONE target pass per chain over seq[:c+2] + drafts. seq: [1, L]. Returns target logits
    [N, depth, V] at the positions that score drafts 1..depth (position c+j scores draft j)."""
    depth = drafts.shape[-1]
    out = []
    for lo in range(0, len(starts), batch_size):
        chunk = starts[lo : lo + batch_size]
        width = max(chunk) + 2 + depth
        batch = torch.zeros(len(chunk), width, dtype=torch.long, device=seq.device)
        for r, c in enumerate(chunk):
            # right padding: causal attention keeps the pads out of every scored position
            batch[r, : c + 2] = seq[0, : c + 2]
            batch[r, c + 2 : c + 2 + depth] = drafts[0, c]
        logits = target(input_ids=batch, use_cache=False).logits.float()
        idx = torch.tensor([[c + j for j in range(1, depth + 1)] for c in chunk], device=seq.device)
        out.append(torch.gather(logits, 1, idx[..., None].expand(-1, -1, logits.shape[-1])))
    return torch.cat(out)


def measure_curves(*, target, drafter, tokenizer, evaluation: dict, seed: int, standalone: bool = False):
    """One (Curve, diagnostics rows) per (condition, temperature) of the evaluation block."""
    results = []
    for condition in evaluation["conditions"]:
        prompts = build_prompts(tokenizer, corpus=evaluation["corpus"], condition=condition,
                                num_prompts=evaluation["num_prompts"], prompt_len=evaluation["prompt_len"],
                                long_context_len=evaluation["long_context_len"], seed=seed)
        for temp in evaluation["temperatures"]:
            gen = torch.Generator().manual_seed(seed)
            results.append(_measure(target, drafter, prompts, evaluation, condition, temp, gen, standalone))
    return results


def _measure(target, drafter, prompts, evaluation, condition, temp, gen, standalone):
    depth, n_cont = evaluation["max_depth"], evaluation["continuation_len"]
    device = next(target.parameters()).device
    noise_spec = parse_noise(condition)
    noise = Noise(*noise_spec, gen) if noise_spec else None
    stats = None if standalone else DriftStats(depth)
    accepted, ratios, alphas = [], [], []
    for prompt in prompts:
        p_len = prompt.numel()
        seq = continue_text(target, prompt[None].to(device), n_cont + depth, temp, gen)  # [1, P + G + K]
        starts = list(range(p_len - 1, p_len - 1 + n_cont))  # chain c starts after target token c+1
        if standalone:
            drafts, q_logits = draft_chains_with_model(drafter, seq, starts, depth, temp, gen)
        else:
            streams, _ = target_pass(target, seq, drafter.cfg.capture_layers)
            drafts, q_logits, outs, g0 = draft_all_chains(drafter, seq, streams, depth, temp, gen, noise)
            stats.add(outs, streams, g0, starts)
        p_logits = verify_chains(target, seq, starts, drafts)  # [N, K, V]
        chain_drafts = drafts[0, starts]  # [N, K]
        if temp == 0:
            ok = (p_logits.argmax(-1) == chain_drafts).int()
            accepted += ok.cumprod(dim=1).sum(dim=1).tolist()
            continue
        q = torch.softmax(q_logits[0, starts] / temp, dim=-1)  # [N, K, V]
        p = torch.softmax(p_logits / temp, dim=-1)
        alphas += torch.minimum(p, q).sum(-1).clamp(max=1.0).tolist()
        picked = chain_drafts[..., None]
        ratios += (p.gather(-1, picked) / q.gather(-1, picked)).squeeze(-1).clamp(max=1.0).tolist()
    if temp == 0:
        curve = curve_from_accepted(accepted, depth, condition=condition, temperature=temp)
    else:
        curve = curve_from_sampled(ratios, alphas, condition=condition, temperature=temp)
    return curve, (stats.rows() if stats is not None else [])
