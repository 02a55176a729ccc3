"""The standalone family as the rest of specfleet sees it: what loads, drafts, proposes, times and
exports an independent draft model. It has no drift diagnostics (no hidden-state chaining).
"""

from __future__ import annotations

from pathlib import Path

import torch

from pipeline.core.artifacts import folder_of
from pipeline.core.contracts import Trained
from pipeline.core.model_settings import SERVED_AS
from workers.drafters.standalone.chains import draft_chains_with_model, model_ranks
from workers.drafters.standalone.proposer import ModelProposer
from workers.models.features import cached_forward_states, tree_forward_states
from workers.models.loading import load_model


class ModelChains:
    """Chains of a standalone draft model; it has no drift diagnostics (no hidden-state chaining)."""

    per_depth = False  # a chain of depth k is the first k drafts of the deepest chain

    def __init__(self, model, depth: int):
        self.model, self.depth = model, depth

    def draft(self, seq, starts: list[int], temperature: float, gen, noise):
        return draft_chains_with_model(self.model, seq, starts, self.depth, temperature, gen)

    def ranks(self, seq, starts: list[int], noise):
        return model_ranks(self.model, seq, self.depth, starts)

    def diagnostics(self) -> list[tuple[int, str, float]]:
        return []


class StandaloneFamily:
    name = "standalone"
    method = SERVED_AS[name]
    one_pass = False  # one draft-model pass per draft
    drafts_trees = True

    def load(self, spec, trained: Trained | None, target):
        param = next(target.parameters())
        folder, hf = (folder_of(trained), None) if trained is not None else (None, spec.hf)
        model, _ = load_model(folder=folder, hf=hf, device=param.device, dtype=param.dtype, role="drafter")
        d = model.get_output_embeddings().weight.shape[0]
        t = target.get_output_embeddings().weight.shape[0]
        if d != t:  # a draft model must score the target's token ids
            raise ValueError(
                f"drafter: vocabulary size {d} differs from the target's {t}; "
                "a standalone drafter must share the target's tokenizer"
            )
        return model

    def chains(self, model, target, depth: int) -> ModelChains:
        return ModelChains(model, depth)

    def proposer(self, model) -> ModelProposer:
        return ModelProposer(model)

    def hf_assistant(self, model):
        """The draft model is what HF's assisted generation takes as `assistant_model`."""
        return model

    def step_timer(self, model, target, ctx, context_len: int):
        """One decode step of the draft model against a cached context, the cache cropped back."""
        _, cache, _ = cached_forward_states(model, ctx[:, :-1])
        last = ctx[:, -1:]

        def run():
            cached_forward_states(model, last, cache)
            cache.crop(-1)

        return run

    def level_timers(self, model, target, ctx, context_len: int, widths) -> dict:
        """{width: one draft-model pass over that many tree nodes per sequence}, against one cached
        context that each call crops back."""
        _, cache, _ = cached_forward_states(model, ctx[:, :-1])

        def timer(width: int):
            nodes = ctx[:, -width:] if width <= ctx.shape[1] else ctx[:, :1].expand(-1, width)
            mask = torch.eye(width, dtype=torch.bool)  # siblings: each reads the context and itself
            positions = torch.full(nodes.shape, context_len - 1, device=ctx.device)

            def run():
                tree_forward_states(model, nodes, positions, mask, cache)
                cache.crop(-width)

            return run

        return {w: timer(w) for w in widths}

    def export(
        self, checkpoint: Path, out: Path, layout: str = "eagle3", verifier: str | None = None
    ) -> tuple[str, str]:
        """A draft model is served from its Hugging Face folder as it is."""
        if layout != "eagle3":
            raise ValueError(f"a draft model is served from its own folder; the {layout} format holds EAGLE-3 heads")
        return str(checkpoint.resolve()), self.method
