"""The EAGLE-3 family as the rest of specfleet sees it: what loads, drafts, proposes, times and
exports a drafter of this family. Everything else asks the family (workers/drafters/registry.py)
and never tests what a drafter is.
"""

from __future__ import annotations

from pathlib import Path

import torch

from pipeline.core.artifacts import folder_of
from pipeline.core.contracts import Trained
from pipeline.core.model_settings import SERVED_AS
from workers.drafters.eagle3.chains import draft_all_chains, eagle_ranks, fuse_context
from workers.drafters.eagle3.checkpoint import load_eagle3
from workers.drafters.eagle3.layouts import checkpoint_folder, import_checkpoint
from workers.drafters.eagle3.proposer import EagleProposer
from workers.measure.diagnostics import DriftStats
from workers.models.features import target_pass


class EagleChains:
    """Chains of an EAGLE drafter, with the drift diagnostics of the same drafting passes."""

    def __init__(self, drafter, target, depth: int):
        self.drafter, self.target, self.depth = drafter, target, depth
        self.stats = DriftStats(depth)

    def draft(self, seq, starts: list[int], temperature: float, gen, noise):
        streams, _ = target_pass(self.target, seq, self.drafter.cfg.capture_layers)
        drafts, q_logits, outs, g0 = draft_all_chains(
            self.drafter, seq, streams, self.depth, temperature, gen, starts, noise
        )
        self.stats.add(outs, streams, g0, starts)
        self.g0 = g0
        return drafts, q_logits

    def ranks(self, seq, starts: list[int], noise):
        """After `draft` on the same text: the rank of the target's token at every step
        (workers/drafters/eagle3/chains.py)."""
        return eagle_ranks(self.drafter, seq, self.g0, self.depth, starts, noise)

    def diagnostics(self) -> list[tuple[int, str, float]]:
        return self.stats.rows()


class Eagle3Family:
    name = "eagle3"
    method = SERVED_AS[name]  # what serving engines call a drafter of this family

    def load(self, spec, trained: Trained | None, target):
        """The trained drafter, or the checkpoint the spec names (`path`) read as it is."""
        param = next(target.parameters())
        if trained is not None:
            return load_eagle3(
                folder_of(trained),
                embedding=target.get_input_embeddings().weight,
                device=param.device,
                dtype=param.dtype,
            )
        drafter = import_checkpoint(
            checkpoint_folder(spec.path),
            target.get_input_embeddings().weight.detach().cpu(),
            target.config.num_hidden_layers,
        )
        return drafter.to(device=param.device, dtype=param.dtype)

    def chains(self, drafter, target, depth: int) -> EagleChains:
        return EagleChains(drafter, target, depth)

    def proposer(self, drafter) -> EagleProposer:
        return EagleProposer(drafter)

    def hf_assistant(self, drafter):
        """HF generate cannot draft with an EAGLE head: no assisted-generation comparison."""
        return None

    def step_timer(self, drafter, target, ctx, context_len: int):
        """A closure running one drafter step against a cached context of context_len tokens."""
        g0 = fuse_context(drafter, _batch_streams(target, ctx, drafter.cfg.capture_layers))
        d_cache, logits, chain = drafter.prefill(ctx[:, 1:], g0)  # cached positions 0..L-2
        token = drafter.full_logits(logits).argmax(-1)
        return lambda: drafter.step(token, chain, d_cache, context_len - 1)

    def level_timers(self, drafter, target, ctx, context_len: int, widths) -> dict:
        """{width: a closure running one drafter pass over that many tree nodes per sequence} against
        one cached context (extend leaves the cache as it was)."""
        g0 = fuse_context(drafter, _batch_streams(target, ctx, drafter.cfg.capture_layers))
        d_cache, _, chain = drafter.prefill(ctx[:, 1:], g0)

        def timer(width: int):
            tokens = ctx[:, -width:] if width <= ctx.shape[1] else ctx[:, :1].expand(-1, width)
            g = chain[:, None, :].expand(-1, width, -1)
            return lambda: drafter.extend(d_cache, tokens, g, context_len - 1)

        return {w: timer(w) for w in widths}

    def export(
        self, checkpoint: Path, out: Path, layout: str = "eagle3", verifier: str | None = None
    ) -> tuple[str, str]:
        """(folder, vLLM method): the drafter written once in the EAGLE-3 layout engines load, or in
        the speculators format (which names the `verifier` it drafts for)."""
        from pipeline.core.files import staged_dir
        from pipeline.core.kinds import resolve

        # named, not imported: exporting is the driver's business, no job's code version covers it
        export_eagle3 = resolve("workers.drafters.eagle3.export:export_eagle3")
        export_speculators = resolve("workers.drafters.eagle3.export:export_speculators")
        if not out.is_dir():  # written whole or not at all: a crash leaves no half export to reuse
            with staged_dir(out) as tmp:
                # the export leaves the token embedding out (engines take the target's)
                drafter = load_eagle3(checkpoint, embedding=None, device="cpu", dtype=torch.float32)
                if layout == "speculators":
                    export_speculators(drafter, tmp, verifier=verifier or "")
                else:
                    export_eagle3(drafter, tmp)
        return str(out.resolve()), self.method


def _batch_streams(target, ctx: torch.Tensor, capture: tuple[int, ...]) -> list[torch.Tensor]:
    """The target's captured states for a timing context [B, L], from one pass over its first row seen B
    times: what a drafter step costs does not depend on the values, and a pass over B x L tokens keeps
    every layer's states (an 8B target at 128 x 2048: 70 GB)."""
    streams, _ = target_pass(target, ctx[:1], capture)
    return [s.expand(ctx.shape[0], -1, -1) for s in streams]
