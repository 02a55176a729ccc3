"""The EAGLE-3 family as the rest of specfleet sees it: what loads, drafts, proposes, times and
exports a drafter of this family (drafting, proposing and timing shared with every chain drafter,
workers/drafters/chain/family.py). Everything else asks the family (workers/drafters/registry.py)
and never tests what a drafter is.
"""

from __future__ import annotations

from pathlib import Path

import torch

from pipeline.core.artifacts import folder_of
from pipeline.core.contracts import Trained
from pipeline.core.model_settings import SERVED_AS
from workers.drafters.chain.family import ChainFamily
from workers.drafters.eagle3.checkpoint import load_eagle3
from workers.drafters.eagle3.layouts import checkpoint_folder, import_checkpoint


class Eagle3Family(ChainFamily):
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
