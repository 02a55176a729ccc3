"""The MTP family as the rest of specfleet sees it: what loads and exports a head (drafting,
proposing and timing are every chain drafter's, workers/drafters/chain/family.py).

No stock engine serves these heads: vLLM's `method: mtp`, SGLang's NEXTN and TensorRT-LLM's MTP
build the MTP layers from the target's own model type, for the architectures that ship them
(DeepSeek-V3 and its successors, GLM-4-MoE, MiMo, Qwen3-Next and others), and a Llama-family
target is none of them. Export says so in one line, and `autotune` passes it on.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.core.artifacts import folder_of
from pipeline.core.contracts import Trained
from pipeline.core.model_settings import NOT_SERVED, SERVED_AS
from workers.drafters.chain.family import ChainFamily
from workers.drafters.mtp.checkpoint import load_mtp


class MtpFamily(ChainFamily):
    name = "mtp"
    method = SERVED_AS[name]

    def load(self, spec, trained: Trained | None, target):
        if trained is None:
            raise ValueError(f"drafter {spec.name}: an MTP head is trained here; no checkpoint was given")
        param = next(target.parameters())
        return load_mtp(folder_of(trained), target=target, device=param.device, dtype=param.dtype)

    def export(self, checkpoint: Path, out: Path, layout: str = "eagle3", verifier: str | None = None):
        raise ValueError(NOT_SERVED[self.name])
