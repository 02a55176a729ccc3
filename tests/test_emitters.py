"""Engine configs: every engine rule the emitters know holds for what specfleet emits."""
from __future__ import annotations

import json
import shlex

import pytest
import yaml

from pipeline.core.schedule import check_schedule, schedule_from_choices
from pipeline.emitters import (
    check_sglang_adaptive, check_trtllm, check_vllm, sglang_adaptive,
    sglang_flags, trtllm_config, trtllm_yaml, vllm_command_arg, vllm_config,
)

FALLING = {1: 5, 8: 5, 16: 4, 32: 3, 64: 1, 128: 0}


def test_schedule_ranges_are_inclusive_contiguous_and_merged():
    schedule = schedule_from_choices(FALLING, 512)
    assert schedule == [(1, 8, 5), (9, 16, 4), (17, 32, 3), (33, 64, 1), (65, 512, 0)]
    check_schedule(schedule)
    assert schedule_from_choices({4: 2}, 4) == [(1, 4, 2)]
    assert schedule_from_choices({4: 2, 100: 1}, 50) == [(1, 50, 2)]  # sizes past the maximum are ignored
    with pytest.raises(ValueError):
        schedule_from_choices({}, 8)


def test_vllm_rules():
    config = vllm_config(schedule_from_choices(FALLING, 512), method="eagle3", model="/models/drafter")
    check_vllm(config)
    assert config["num_speculative_tokens"] == 5
    rows = config["num_speculative_tokens_per_batch_size"]
    assert rows[0][0] == 1 and all(a[1] + 1 == b[0] for a, b in zip(rows, rows[1:]))
    assert all(k <= config["num_speculative_tokens"] for _, _, k in rows)
    arg = vllm_command_arg(config)
    assert json.loads(shlex.split(arg)[1]) == config
    for broken in ({**config, "num_speculative_tokens": 4},  # a scheduled K above the maximum
                   {**config, "num_speculative_tokens_per_batch_size": [[2, 8, 5]]},  # not starting at 1
                   {**config, "num_speculative_tokens_per_batch_size": [[1, 8, 5], [8, 16, 4]]},  # overlap
                   {**config, "num_speculative_tokens": 0},
                   {**config, "tensor_parallel_size": 2}):
        with pytest.raises(ValueError):
            check_vllm(broken)


def test_sglang_flags_and_adaptive_rules():
    flags = sglang_flags(3, model="/models/drafter")
    pairs = dict(zip(flags[::2], flags[1::2]))
    assert pairs["--speculative-num-steps"] == "3" and pairs["--speculative-num-draft-tokens"] == "4"
    assert pairs["--speculative-eagle-topk"] == "1" and pairs["--speculative-algorithm"] == "EAGLE3"
    adaptive = sglang_adaptive(schedule_from_choices(FALLING, 512))
    check_sglang_adaptive(adaptive)
    assert list(adaptive) == ["1", "9", "17", "33", "65"]  # lower bounds of the ranges
    assert adaptive["1"]["candidate_steps"] == [3, 4, 5] and adaptive["65"]["candidate_steps"] == [0]
    with pytest.raises(ValueError):
        check_sglang_adaptive({"2": {"candidate_steps": [1]}})


def test_trtllm_rules():
    config = trtllm_config(schedule_from_choices(FALLING, 512), model="/models/drafter")
    check_trtllm(config)
    spec = config["speculative_config"]
    assert spec["draft_len_schedule"] == {8: 5, 16: 4, 32: 3, 64: 1}  # above 64: no speculation
    assert spec["max_draft_len"] == spec["draft_len_schedule"][8]
    assert yaml.safe_load(trtllm_yaml(config)) == config
    rising = trtllm_config([(1, 4, 2), (5, 8, 3)], model="m")["speculative_config"]
    assert rising["max_draft_len"] == 2 and max(rising["draft_len_schedule"].values()) <= 2
    with pytest.raises(ValueError):
        trtllm_config([(1, 8, 0)], model="m")
    with pytest.raises(ValueError):
        check_trtllm({"speculative_config": {"max_draft_len": 4, "draft_len_schedule": {4: 3, 16: 2}}})
