"""Acceptance-versus-depth measurement: many chains per prompt, one target pass per chain.

For each held-out prompt the target first continues the text itself (greedy at temperature
0, sampled otherwise), so every chain starts right after a token the target emitted, as in
real decoding. A chain starting at position c drafts `max_depth` tokens; ONE target pass over
prefix + drafts scores all of them, which gives accept_len(k) for every k <= max_depth.
"""
from __future__ import annotations

import torch

from pipeline.acceptance import curve_from_accepted, curve_from_sampled
from pipeline.types import Curve
from workers.features import cached_forward_states, target_pass
from workers.sampling import sample
from workers.tokenizer import token_stream


@torch.no_grad()
def continue_text(target, ids: torch.Tensor, n_new: int, temperature: float, gen: torch.Generator):
    """The target's own continuation, with its KV cache. ids: [B, P] -> [B, P + n_new]."""
    logits, cache, _ = cached_forward_states(target, ids)
    seq = ids
    for _ in range(n_new):
        nxt = sample(logits[:, -1].float(), temperature, gen)  # [B]
        seq = torch.cat([seq, nxt[:, None]], dim=1)
        logits, cache, _ = cached_forward_states(target, nxt[:, None], cache)
    return seq


def heldout_prompts(tokenizer, corpus: str, num_prompts: int, prompt_len: int, seed: int) -> torch.Tensor:
    """[num_prompts, prompt_len] windows of held-out text, each starting with BOS."""
    stream = token_stream(tokenizer, corpus, "heldout", max_chars=400_000)
    if stream.numel() < prompt_len + num_prompts:
        raise ValueError(f"held-out {corpus} corpus too small for {num_prompts} prompts of {prompt_len} tokens")
    gen = torch.Generator().manual_seed(seed)
    starts = torch.randperm(stream.numel() - prompt_len, generator=gen)[:num_prompts]
    batch = torch.stack([stream[s : s + prompt_len] for s in starts.tolist()])
    if tokenizer.bos_token_id is not None:
        batch[:, 0] = tokenizer.bos_token_id
    return batch


@torch.no_grad()
def draft_all_chains(drafter, seqs: torch.Tensor, streams, depth: int, temperature: float, gen):
    """Draft `depth` tokens for a chain starting at every position, in `depth` drafter passes.

    seqs: [B, L]; streams: the target's captured states for seqs. Returns drafts [B, L-1, depth]
    (chain c's j-th draft at [:, c, j-1]) and the drafter's logits for them [B, L-1, depth, V].
    Entries of chains that would run past the end of seqs are meaningless; callers skip them.
    """
    g0 = drafter.fuse([s[:, :-1].to(drafter.fc.weight.dtype) for s in streams])
    outs = drafter.forward_steps(seqs[:, 1:], g0, depth,
                                 pick=lambda lg: sample(drafter.full_logits(lg.float()), temperature, gen))
    # step s at position i belongs to the chain that started at c = i - s: align on c
    drafts = torch.stack([torch.roll(o.picked, -s, dims=1) for s, o in enumerate(outs)], dim=2)
    logits = torch.stack([torch.roll(drafter.full_logits(o.logits.float()), -s, dims=1)
                          for s, o in enumerate(outs)], dim=2)
    return drafts, logits


@torch.no_grad()
def verify_chains(target, seqs, starts, drafts, batch_size: int = 64):
    """ONE target pass per chain over seqs[:c+2] + drafts. Returns target logits [N, depth, V]
    at the positions that score drafts 1..depth (position c+j scores draft j)."""
    depth = drafts.shape[-1]
    rows = [(b, c) for b in range(seqs.shape[0]) for c in starts]
    out = []
    for lo in range(0, len(rows), batch_size):
        chunk = rows[lo : lo + batch_size]
        width = max(c for _, c in chunk) + 2 + depth
        batch = torch.zeros(len(chunk), width, dtype=torch.long, device=seqs.device)
        for r, (b, c) in enumerate(chunk):
            # right padding: causal attention keeps the pads out of every scored position
            batch[r, : c + 2] = seqs[b, : c + 2]
            batch[r, c + 2 : c + 2 + depth] = drafts[b, c]
        logits = target(input_ids=batch, use_cache=False).logits.float()
        idx = torch.tensor([[c + j for j in range(1, depth + 1)] for _, c in chunk], device=seqs.device)
        out.append(torch.gather(logits, 1, idx[..., None].expand(-1, -1, logits.shape[-1])))
    return torch.cat(out), rows


def measure_curve(*, target, drafter, tokenizer, evaluation: dict, seed: int, condition: str = "default") -> Curve:
    """The acceptance curve of one pairing on held-out prompts of one corpus."""
    depth, temp = evaluation["max_depth"], evaluation["temperature"]
    n_cont, p_len = evaluation["continuation_len"], evaluation["prompt_len"]
    gen = torch.Generator().manual_seed(seed)
    device = next(target.parameters()).device
    prompts = heldout_prompts(tokenizer, evaluation["corpus"], evaluation["num_prompts"], p_len, seed).to(device)
    seqs = continue_text(target, prompts, n_cont + depth, temp, gen)  # [B, P + G + K]
    streams, _ = target_pass(target, seqs, drafter.cfg.capture_layers)
    drafts, q_logits = draft_all_chains(drafter, seqs, streams, depth, temp, gen)
    starts = list(range(p_len - 1, p_len - 1 + n_cont))  # chain c starts after target token c+1
    p_logits, rows = verify_chains(target, seqs, starts, drafts)
    chain_drafts = torch.stack([drafts[b, c] for b, c in rows])  # [N, K]
    if temp == 0:
        ok = (p_logits.argmax(-1) == chain_drafts).int()  # [N, K]
        accepted = ok.cumprod(dim=1).sum(dim=1).tolist()
        return curve_from_accepted(accepted, depth, condition=condition, temperature=temp)
    q = torch.softmax(torch.stack([q_logits[b, c] for b, c in rows]) / temp, dim=-1)  # [N, K, V]
    p = torch.softmax(p_logits / temp, dim=-1)
    alphas = torch.minimum(p, q).sum(-1).clamp(max=1.0)  # [N, K]
    picked = chain_drafts[..., None]
    ratios = (p.gather(-1, picked) / q.gather(-1, picked)).squeeze(-1).clamp(max=1.0)  # [N, K]
    return curve_from_sampled(ratios.tolist(), alphas.tolist(), condition=condition, temperature=temp)
