"""vLLM's refusals as one line, without vLLM: the root cause found in its output, a missing environment."""

from __future__ import annotations

import pytest

from workers.serving.vllm_engine import VllmError, check_configs, root_cause


def test_root_cause_skips_the_lines_that_only_say_the_engine_failed():
    output = (
        "(Worker pid=1) ERROR 12-05 [x.py:9] ValueError: the real reason\n"
        "Traceback (most recent call last):\n"
        "(EngineCore pid=2) ERROR 12-05 [c.py:3] RuntimeError: Worker failed with error 'the real reason'\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    )
    assert root_cause(output) == "ValueError: the real reason"
    assert root_cause("nothing went wrong\n") is None


def test_a_missing_environment_is_one_line(tmp_path):
    with pytest.raises(VllmError, match="does not exist .build one with `make vllm`"):
        check_configs(str(tmp_path / "python"), model="m", dtype="float32", configs=[])
