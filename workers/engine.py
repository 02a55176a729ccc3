"""The speculative decoding engine: draft k -> ONE verify pass -> accept/reject -> residual -> bonus.

Chain drafting at any depth and temperature, with KV caches for the target and the drafter.
Acceptance rule (Leviathan et al., Chen et al.): draft x is kept with probability
min(1, p(x)/q(x)); at the first rejection the emitted token is drawn from norm(max(0, p - q));
if every draft is kept, a bonus token is drawn from the target's (k+1)-th distribution. At
temperature 0 a draft is kept while it equals the target's argmax, so the output is the
target's own greedy decode.

Drafters plug in as proposers: `EagleProposer` (drafter fed by the target's hidden states) and
`ModelProposer` (an independent small causal LM sharing the target's tokenizer).
"""
from __future__ import annotations

import time

import torch

from workers.features import cached_forward_states, tree_forward_states
from workers.sampling import drafting_temperature, one_hot_q, sample
from workers.tree import draw_level


def residual_sample(p: torch.Tensor, q: torch.Tensor, gen: torch.Generator | None) -> int:
    """One draw from norm(max(0, p - q)); from p itself in the measure-zero case p == q. p, q: [V]"""
    r = (p - q).clamp(min=0)
    total = r.sum()
    r = r / total if total > 0 else p
    return int(torch.multinomial(r.cpu(), 1, generator=gen))


def accept_drafts(logits: torch.Tensor, drafts: list[int], q: torch.Tensor | None, temperature: float, gen):
    """logits: [k+1, V] target logits scoring drafts 1..k and the bonus; q: [k, V] draft probs.

    Returns (number of drafts accepted n, the token emitted after them: correction or bonus).
    """
    k = len(drafts)
    if temperature == 0:
        want = logits.argmax(-1).tolist()
        n = 0
        while n < k and drafts[n] == want[n]:
            n += 1
        return n, want[n]
    p = torch.softmax(logits.float() / temperature, dim=-1)  # [k+1, V]
    for j, x in enumerate(drafts):
        ratio = (p[j, x] / q[j, x]).clamp(max=1.0)
        if torch.rand((), generator=gen) >= ratio:  # rejected: resample from the residual
            return j, residual_sample(p[j], q[j], gen)
    return k, int(torch.multinomial(p[k].cpu(), 1, generator=gen))


@torch.no_grad()
def generate(target, proposer, prompt: torch.Tensor, *, max_new: int, depth: int, temperature: float,
             gen: torch.Generator | None = None, timing: dict | None = None, draft_sampling: str = "sampled"):
    """Decode max_new tokens after prompt ([1, P]). Returns (tokens, drafts accepted per target pass).

    At temperature > 0, `draft_sampling` says how drafts are drawn and verified
    (workers/sampling.py): from q, or the drafter's argmax verified with q one-hot.

    depth 0 is plain decoding: one target pass per token, the proposer is never called. With a
    `timing` dict, the decoding after the prompt's pass (prefill excluded) is timed into it:
    decode_s, tokens (every token emitted after the first, overshoot past max_new included) and
    passes (target passes).
    """
    if depth < 0:
        raise ValueError(f"depth must be >= 0 (0 is plain decoding), got {depth}")
    capture = proposer.capture if depth else ()
    logits, cache, streams = cached_forward_states(target, prompt, None, capture)
    y = int(sample(logits[0, -1].float(), temperature, gen))  # the first token is the target's own
    out, accepted = [y], []
    if depth:
        proposer.start(prompt[0].tolist() + [y], streams)
    draft_temp = drafting_temperature(temperature, draft_sampling)
    t0 = clock(prompt.device)
    while len(out) < max_new:
        drafts, q = proposer.propose(depth, draft_temp, gen) if depth else ([], None)
        inp = torch.tensor([[y] + drafts], device=prompt.device)
        logits, cache, streams = cached_forward_states(target, inp, cache, capture)  # the ONE verify pass
        if drafts and temperature > 0 and draft_temp == 0:  # greedy drafts: q is one-hot on each
            q = one_hot_q(inp[0, 1:], logits.shape[-1])
        n, nxt = accept_drafts(logits[0], drafts, q, temperature, gen)
        if depth - n > 0:
            cache.crop(-(depth - n))  # forget the rejected drafts; y and the accepted ones stay
        emitted = drafts[:n] + [nxt]
        if depth:
            proposer.accept(emitted, [s[:, : n + 1] for s in streams])
        out += emitted
        accepted.append(n)
        y = nxt
    if timing is not None:
        timing.update(decode_s=clock(prompt.device) - t0, tokens=len(out) - 1, passes=len(accepted))
    return out[:max_new], accepted


def clock(device: torch.device) -> float:
    """Wall time in seconds after the device's queued work has finished."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


class EagleProposer:
    """An EAGLE-3-style drafter: its position i reads token x_{i+1} and the target's features at i."""

    def __init__(self, drafter):
        self.drafter = drafter
        self.capture = drafter.cfg.capture_layers

    def _fuse(self, streams):
        return self.drafter.fuse([s.to(self.drafter.fc.weight.dtype) for s in streams])

    def start(self, tokens: list[int], streams) -> None:
        """tokens: committed ids ending with the newest one; streams: target features of all but it."""
        ids = torch.tensor([tokens[1:]], device=streams[0].device)
        self.cache, self.logits, self.chain = self.drafter.prefill(ids, self._fuse(streams))
        self.pos = len(tokens) - 2  # the last cached drafter position

    def propose(self, depth: int, temperature: float, gen):
        drafts, qs = [], []
        cache, logits, chain, pos = self.cache, self.logits, self.chain, self.pos
        for j in range(depth):
            full = self.drafter.full_logits(logits[0].float())  # [V]
            tok = int(sample(full, temperature, gen))
            drafts.append(tok)
            if temperature > 0:
                qs.append(torch.softmax(full / temperature, dim=-1))
            if j < depth - 1:
                token = torch.tensor([tok], device=full.device)
                cache, logits, chain = self.drafter.step(token, chain, cache, pos + 1 + j)
        return drafts, (torch.stack(qs) if qs else None)

    def propose_tree(self, layout, temperature: float, gen):
        """Draft a tree one level per drafter pass. Returns (tokens of nodes 1..n, {node index: the q its
        children were drawn from}, empty with top-m drafts)."""
        tokens = [0] * (layout.n + 1)
        qs: dict[int, torch.Tensor] = {}
        logits = {0: self.drafter.full_logits(self.logits[0].float())}
        chains = {0: self.chain[0]}
        tree_kv, ran = None, []  # nodes whose keys are in tree_kv, in order
        for d in range(1, layout.max_depth + 1):
            draw_level(layout, d, logits, tokens, qs, temperature, gen)
            inner = [i for i in layout.level(d) if layout.children[i]]  # leaves need no drafter pass
            if not inner:
                break
            device = self.chain.device
            visible = layout.ancestry[inner][:, ran] if ran else torch.zeros(len(inner), 0, dtype=torch.bool)
            tree_kv, out, chain = self.drafter.tree_step(
                torch.tensor([tokens[i] for i in inner], device=device),
                torch.stack([chains[layout.parent[i]] for i in inner]), self.cache, tree_kv, visible, self.pos + d)
            for j, i in enumerate(inner):
                logits[i], chains[i] = self.drafter.full_logits(out[j].float()), chain[j]
            ran += inner
        return tokens[1:], qs

    def accept(self, emitted: list[int], streams) -> None:
        """emitted: accepted drafts + the target's token; streams: target features at their inputs."""
        ids = torch.tensor([emitted], device=streams[0].device)
        self.cache, self.logits, self.chain = self.drafter.extend(self.cache, ids, self._fuse(streams), self.pos + 1)
        self.pos += len(emitted)

    accept_tree = accept  # a tree round hands on the accepted path as a chain round does


class ModelProposer:
    """An independent causal LM with the target's tokenizer, drafting from its own KV cache."""

    capture: tuple[int, ...] = ()

    def __init__(self, model):
        self.model = model

    def start(self, tokens: list[int], streams=None) -> None:
        device = next(self.model.parameters()).device
        _, self.cache = cached_forward_states(self.model, torch.tensor([tokens[:-1]], device=device), None, ())[:2]
        self.pending = [tokens[-1]]  # committed tokens the draft cache has not seen yet

    def propose(self, depth: int, temperature: float, gen):
        device = next(self.model.parameters()).device
        feed, drafts, qs = self.pending, [], []
        self.fed_before = len(self.pending)
        for j in range(depth):
            logits, self.cache, _ = cached_forward_states(self.model, torch.tensor([feed], device=device), self.cache, ())
            full = logits[0, -1].float()
            tok = int(sample(full, temperature, gen))
            drafts.append(tok)
            if temperature > 0:
                qs.append(torch.softmax(full / temperature, dim=-1))
            feed = [tok]
        self.depth = depth
        return drafts, (torch.stack(qs) if qs else None)

    def propose_tree(self, layout, temperature: float, gen):
        """Draft a tree one level per forward (a tree attention mask over the draft model's cache).
        Returns (tokens of nodes 1..n, {node index: the q its children were drawn from}). The tree's
        entries leave the cache afterwards: the accepted drafts are fed again with the next round."""
        device = next(self.model.parameters()).device
        out, self.cache, _ = cached_forward_states(self.model, torch.tensor([self.pending], device=device), self.cache, ())
        base = self.cache.get_seq_length()  # the root (the newest committed token) sits at base - 1
        tokens = [0] * (layout.n + 1)
        qs: dict[int, torch.Tensor] = {}
        logits = {0: out[0, -1].float()}
        ran: list[int] = []
        for d in range(1, layout.max_depth + 1):
            draw_level(layout, d, logits, tokens, qs, temperature, gen)
            inner = [i for i in layout.level(d) if layout.children[i]]
            if not inner:
                break
            mask = layout.ancestry[inner][:, ran + inner]
            step, self.cache, _ = tree_forward_states(
                self.model, torch.tensor([[tokens[i] for i in inner]], device=device),
                torch.full((1, len(inner)), base - 1 + d, device=device), mask, self.cache)
            for j, i in enumerate(inner):
                logits[i] = step[0, j].float()
            ran += inner
        if ran:
            self.cache.crop(-len(ran))
        self.pending = []
        return tokens[1:], qs

    def accept_tree(self, emitted: list[int], streams=None) -> None:
        """After a tree round: every emitted token is fed with the next one."""
        self.pending = list(emitted)

    def accept(self, emitted: list[int], streams=None) -> None:
        n = len(emitted) - 1
        kept = min(n, self.depth - 1)  # drafts 1..depth-1 were fed; the last one never was
        drop = (self.depth - 1) - kept
        if drop > 0:
            self.cache.crop(-drop)
        self.pending = emitted[kept:]
