"""Engine names as users type them read as the names specfleet's engine modules use."""

from __future__ import annotations

import pytest

from pipeline.autotune.engines.registry import ENGINES
from pipeline.core.engine_names import canonical_engine

SPELLINGS = {
    "vllm": ["vllm", "vLLM", "VLLM"],
    "sglang": ["sglang", "SGLang", "SGLANG"],
    "trtllm": ["trtllm", "trt-llm", "TRT_LLM", "tensorrt-llm", "TensorRT-LLM", "tensorrt_llm"],
    "transformers": ["transformers", "Transformers", "hf", "HF"],
}


@pytest.mark.parametrize("name,spelling", [(n, s) for n, spellings in SPELLINGS.items() for s in spellings])
def test_each_spelling_reads_as_the_engines_name(name, spelling):
    assert canonical_engine(spelling) == name


def test_the_names_are_the_engine_modules():
    assert set(SPELLINGS) == set(ENGINES)


@pytest.mark.parametrize("name", ["tgi", "llama.cpp", "", "vllm2"])
def test_a_name_of_no_engine_comes_back_as_given(name):
    assert canonical_engine(name) == name
