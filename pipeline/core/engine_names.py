"""Serving engines' names as users type them, read as the names specfleet uses.

specfleet names the engines `vllm`, `sglang`, `trtllm` and `transformers` (the modules of
pipeline/autotune/engines/). Users write them as the projects do (`vLLM`, `SGLang`,
`TensorRT-LLM`), or by a common short name (`trt-llm`, `hf`): wherever an engine name is read
(the spec's `serving.engine`, `specfleet autotune --engine`) it goes through `canonical_engine`
first, and the check that follows names the canonical names.
"""

from __future__ import annotations

import re

# each spelling with case, spaces, '-' and '_' dropped -> the name specfleet uses
_SPELLINGS = {
    "vllm": "vllm",
    "sglang": "sglang",
    "trtllm": "trtllm",
    "tensorrtllm": "trtllm",
    "transformers": "transformers",
    "hf": "transformers",
}


def canonical_engine(name: str) -> str:
    """The name specfleet uses for the engine `name` spells (`VLLM` -> vllm, `TensorRT-LLM` ->
    trtllm, `hf` -> transformers); a name of no engine comes back as given, for the caller to refuse."""
    return _SPELLINGS.get(re.sub(r"[\s_\-]", "", name).lower(), name)
