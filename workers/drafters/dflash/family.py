"""The DFlash family as the rest of specfleet sees it: what loads, drafts, proposes, times and exports
a block drafter. Its drafting costs one block pass whatever the depth (`one_pass`), which the cost model
reads (pipeline/core/choice.py); it drafts no tree.
"""

from __future__ import annotations

from pathlib import Path

import torch

from pipeline.core.artifacts import folder_of
from pipeline.core.contracts import Trained
from pipeline.core.model_settings import SERVED_AS
from workers.drafters.chain.family import batch_streams
from workers.drafters.dflash.chains import BlockChains
from workers.drafters.dflash.checkpoint import load_dflash
from workers.drafters.dflash.proposer import BlockProposer


class DFlashFamily:
    name = "dflash"
    method = SERVED_AS[name]
    one_pass = True  # the drafts of a round cost one drafter pass, whatever their number
    drafts_trees = False  # its curves measure no ranks and its profile times no tree

    def load(self, spec, trained: Trained | None, target):
        if trained is None:
            raise ValueError(f"drafter {spec.name}: a DFlash drafter is trained here; no checkpoint was given")
        param = next(target.parameters())
        drafter = load_dflash(folder_of(trained), target=target, device=param.device, dtype=param.dtype)
        drafter.block_drafting = spec.block_drafting  # how it is run: measured, timed and validated alike
        return drafter

    def chains(self, drafter, target, depth: int) -> BlockChains:
        return BlockChains(drafter, target, depth)

    def proposer(self, drafter) -> BlockProposer:
        return BlockProposer(drafter)

    def hf_assistant(self, drafter):
        """HF generate cannot draft with a block drafter: no assisted-generation comparison."""
        return None

    def step_timer(self, drafter, target, ctx, context_len: int):
        """A closure running one block pass (all of a round's drafts) against a cached context of
        context_len - 1 positions (the newest token is the block's first). The trained block's, also for
        a drafter run on blocks of depth + 1: the most a round's pass costs at any depth."""
        context = drafter.context(batch_streams(target, ctx[:, :-1], drafter.cfg.capture_layers))
        cache = drafter.extend_context(None, context, 0)
        return lambda: drafter.draft_block(cache, ctx[:, -1], context_len - 1)

    def level_timers(self, drafter, target, ctx, context_len: int, widths) -> dict:
        raise ValueError("a DFlash drafter drafts one block, not a tree")

    def export(
        self, checkpoint: Path, out: Path, layout: str = "eagle3", verifier: str | None = None
    ) -> tuple[str, str]:
        """(folder, vLLM method): the drafter written once in the layout vLLM loads DFlash drafters from."""
        from pipeline.core.files import staged_dir
        from pipeline.core.kinds import resolve

        if layout != "eagle3":
            raise ValueError(f"a DFlash drafter has one engine layout; the {layout} format holds EAGLE-3 heads")
        export_dflash = resolve("workers.drafters.dflash.export:export_dflash")  # the driver's, no job's
        if not out.is_dir():  # written whole or not at all
            with staged_dir(out) as tmp:
                export_dflash(load_dflash(checkpoint, target=None, device="cpu", dtype=torch.float32), tmp)
        return str(out.resolve()), self.method
