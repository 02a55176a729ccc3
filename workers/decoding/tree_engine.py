"""The speculative engine with draft trees: draft a tree -> ONE target pass under a tree attention
mask -> walk down the accepted path -> keep the KV cache of that path only.

Every node is verified in one target pass: node i reads the context, its ancestors and itself,
at position (context + its depth). Walking down from the root, at temperature 0 the child whose
token is the target's argmax is taken, so the output is the target's greedy decode. At
temperature above 0, a node's children are tried in the order they were drawn by recursive
rejection sampling (Jeon et al. 2024), which keeps the target's distribution exactly when the
siblings were drawn without replacement: draft x_i, drawn from q_i (q with the earlier siblings
removed, renormalised), is kept with probability min(1, p_i(x_i) / q_i(x_i)); after a rejection
p_{i+1} = norm(max(0, p_i - q_i)). When every sibling is rejected, the emitted token is drawn
from the last residual; at a leaf, from p (the bonus token). Top-m siblings are verified as
one-hot drafts (q_i all on x_i): p_{i+1} is p_i without x_i.

A tree is drafted one level per drafter pass: an EAGLE head's level attends to its ancestors
only, a draft model runs under a tree mask. The tests hold the output to the target's greedy
decode at temperature 0 (and, for a top-1 tree, to the chain engine pass for pass), to the
enumerated target distribution by chi-square above 0, and show the chain's rule applied to each
sibling failing that test; at temperature 0 the drafts it keeps equal, pass by pass, what the
measured rank paths predict.
"""

from __future__ import annotations

import torch

from workers.decoding.chain import clock
from workers.decoding.sampling import drafting_temperature, sample
from workers.decoding.tree import TreeLayout
from workers.models.features import cached_forward_states, keep_path, tree_forward_states


def choose_child(p: torch.Tensor, q: torch.Tensor | None, drafts: list[int], gen) -> tuple[int | None, int]:
    """Recursive rejection sampling over siblings in draw order. p: [V] target probabilities; q: [V]
    the distribution the siblings were drawn from without replacement (None: top-m, one-hot).
    Returns (index of the kept sibling or None, the token emitted)."""
    p = p.clone()
    q = q.clone() if q is not None else None
    for i, x in enumerate(drafts):
        qi = q if q is not None else torch.nn.functional.one_hot(torch.tensor(x), p.numel()).to(p)
        if float(torch.rand((), generator=gen)) < float((p[x] / qi[x]).clamp(max=1.0)):
            return i, x
        residual = (p - qi).clamp(min=0)
        if residual.sum() > 0:
            p = residual / residual.sum()
        if q is not None:  # the next sibling was drawn without this one
            q[x] = 0
            if q.sum() <= 0:
                break
            q = q / q.sum()
    return None, int(torch.multinomial(p.cpu(), 1, generator=gen))


def walk_tree(logits: torch.Tensor, layout: TreeLayout, tokens: list[int], qs: dict, temperature: float, gen):
    """The accepted path (node indices, root excluded) and the token emitted after it.
    logits: [n + 1, V] target logits at the root and every node."""
    node, path = 0, []
    while True:
        kids = layout.children[node]
        if temperature == 0:
            want = int(logits[node].argmax())
            hit = next((c for c in kids if tokens[c - 1] == want), None)
            if hit is None:
                return path, want
        else:
            p = torch.softmax(logits[node].float() / temperature, dim=-1)
            if not kids:
                return path, int(torch.multinomial(p.cpu(), 1, generator=gen))
            i, tok = choose_child(p, qs.get(node), [tokens[c - 1] for c in kids], gen)
            if i is None:
                return path, tok
            hit = kids[i]
        path.append(hit)
        node = hit


@torch.no_grad()
def generate_tree(
    target,
    proposer,
    prompt: torch.Tensor,
    *,
    max_new: int,
    tree,
    temperature: float,
    gen: torch.Generator | None = None,
    timing: dict | None = None,
    draft_sampling: str = "sampled",
):
    """Decode max_new tokens after prompt ([1, P]) drafting `tree` (pipeline/core/trees.py) each round.
    Returns (tokens, drafts accepted per target pass). An empty tree is plain decoding; `timing` as
    in workers/engine.generate."""
    layout = TreeLayout(tree)
    capture = proposer.capture if layout.n else ()
    logits, cache, streams = cached_forward_states(target, prompt, None, capture)
    y = int(sample(logits[0, -1].float(), temperature, gen))
    out, accepted = [y], []
    if layout.n:
        proposer.start(prompt[0].tolist() + [y], streams)
    draft_temp = drafting_temperature(temperature, draft_sampling)
    device = prompt.device
    offsets = torch.tensor(layout.depth, device=device)
    t0 = clock(device)
    while len(out) < max_new:
        tokens, qs = proposer.propose_tree(layout, draft_temp, gen) if layout.n else ([], {})
        past = cache.get_seq_length()
        ids = torch.tensor([[y] + tokens], device=device)
        logits, cache, streams = tree_forward_states(
            target, ids, (past + offsets)[None], layout.ancestry, cache, capture
        )  # the ONE verify pass
        path, nxt = walk_tree(logits[0], layout, tokens, qs, temperature, gen)
        if layout.n:
            kept = torch.tensor([0] + path, device=device)
            keep_path(cache, past, kept)
            emitted = [tokens[i - 1] for i in path] + [nxt]
            proposer.accept_tree(emitted, [s[:, kept] for s in streams])
        else:
            emitted = [nxt]
        out += emitted
        accepted.append(len(path))
        y = nxt
    if timing is not None:
        timing.update(decode_s=clock(device) - t0, tokens=len(out) - 1, passes=len(accepted))
    return out[:max_new], accepted
