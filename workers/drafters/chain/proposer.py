"""A chain drafter (EAGLE-3, an MTP head) as the engine's proposer (workers/decoding/chain.py): drafts
from the drafter's own KV cache, fed the target's hidden states of every committed token."""

from __future__ import annotations

import torch

from workers.decoding.sampling import sample
from workers.decoding.tree import draw_level


class ChainProposer:
    """A chain drafter: its position i reads token x_{i+1} and the target's features at i."""

    def __init__(self, drafter):
        self.drafter = drafter
        self.capture = drafter.cfg.capture_layers

    def _fuse(self, streams):
        return self.drafter.fuse([s.to(self.drafter.dtype) for s in streams])

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
                torch.stack([chains[layout.parent[i]] for i in inner]),
                self.cache,
                tree_kv,
                visible,
                self.pos + d,
            )
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
