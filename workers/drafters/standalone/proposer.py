"""A standalone draft model as the engine's proposer (workers/decoding/chain.py): drafts from its own
KV cache, fed only tokens."""

from __future__ import annotations

import torch

from workers.decoding.sampling import sample
from workers.decoding.tree import draw_level
from workers.models.features import cached_forward_states, tree_forward_states


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
        for _ in range(depth):
            logits, self.cache, _ = cached_forward_states(
                self.model, torch.tensor([feed], device=device), self.cache, ()
            )
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
        out, self.cache, _ = cached_forward_states(
            self.model, torch.tensor([self.pending], device=device), self.cache, ()
        )
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
                self.model,
                torch.tensor([[tokens[i] for i in inner]], device=device),
                torch.full((1, len(inner)), base - 1 + d, device=device),
                mask,
                self.cache,
            )
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
