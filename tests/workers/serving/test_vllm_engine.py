"""Real vLLM, in its own environment, on the tiny target and a trained EAGLE-3 drafter exported by
specfleet: vLLM's config classes accept what `autotune --engine vllm` emits, the engine serves it
with greedy output identical to plain decoding at each batch size, at the depth the emitted
schedule names for that batch size, and what vLLM refuses comes back as one line of its own words.

Each engine start takes about 25 s on 2 cores: the starts are shared by the module's fixtures.
Skipped, with the reason, where no vLLM environment exists (`make vllm` builds one; CI does).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import safetensors.torch
import torch
from conftest import build_tiny_drafter, build_tiny_target
from support.vllm import vllm_python

from pipeline.autotune.engines.registry import emit
from workers.drafters.eagle3.export import export_eagle3
from workers.serving.vllm_engine import VllmError, check_configs, serve

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.long]
PROMPTS = [[1, *range(20 + 7 * i, 60 + 7 * i)] for i in range(4)]  # BOS, then 40 tokens each
SCHEDULE = [(1, 1, 3), (2, 8, 1)]  # depth 3 alone, depth 1 from two requests on


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """The tiny target (with two heads: vLLM's CPU attention has no kernel for the usual tiny
    target's head size of 16) as a model folder, and a trained pre-norm drafter exported by specfleet
    in the EAGLE-3 layout."""
    tiny = build_tiny_target(heads=2)
    target, tokenizer, _ = tiny
    drafter, _ = build_tiny_drafter(tiny, "pre")
    root = tmp_path_factory.mktemp("vllm")
    target.save_pretrained(root / "target", safe_serialization=True)
    tokenizer.save_pretrained(root / "target")
    export_eagle3(drafter, root / "drafter", dtype=torch.float32)
    return root / "target", root / "drafter"


def _emitted(drafter: Path) -> dict:
    """The speculative config `autotune --engine vllm` prints for SCHEDULE, as vLLM reads it."""
    text = emit("vllm", SCHEDULE, model=str(drafter), method="eagle3", version="0.32.0").text
    flag, config = shlex.split(text)
    assert flag == "--speculative-config"
    return json.loads(config)


def _serve(folders, config):
    target, _ = folders
    return serve(
        vllm_python(),
        model=str(target),
        dtype="float32",
        speculative_config=config,
        prompts=PROMPTS,
        max_tokens=24,
        batch_sizes=[1, 4],
        max_model_len=256,
        repeats=2,
        cpu_threads=2,
    )


@pytest.fixture(scope="module")
def plain(folders):
    return _serve(folders, None)


def test_vllm_accepts_what_autotune_emits_and_refuses_in_one_line(folders):
    target, drafter = folders
    emitted = _emitted(drafter)
    assert emitted["num_speculative_tokens_per_batch_size"] == [[1, 1, 3], [2, 8, 1]]
    bad = {**emitted, "num_speculative_tokens_per_batch_siz": [[1, 8, 2]]}  # a misspelt key
    checked = check_configs(vllm_python(), model=str(target), dtype="float32", configs=[emitted, bad])
    assert checked[0] is None
    assert checked[1].startswith("ValidationError: num_speculative_tokens_per_batch_siz: ") and "\n" not in checked[1]


def test_vllm_serves_the_emitted_schedule_with_plain_greedy_output(folders, plain):
    served = _serve(folders, _emitted(folders[1]))
    for ours, theirs in zip(served["batches"], plain["batches"]):
        # every prompt, b at a time, twice over: the second repeat decodes what the first did
        assert ours["outputs"] == theirs["outputs"] and ours["tokens"] == 2 * 24 * len(PROMPTS)
        n = len(PROMPTS)
        assert ours["outputs"][:n] == ours["outputs"][n:]
        groups = ours["group_seconds"]
        assert [len(row) for row in groups] == [-(-n // ours["batch_size"])] * 2
        assert sum(map(sum, groups)) == pytest.approx(ours["seconds"])
    one, four = served["batches"]
    assert one["draft_tokens"] == 3 * one["drafts"] > 0  # depth 3 alone
    assert sum(one["accepted_per_pos"]) == one["accepted"] and len(one["accepted_per_pos"]) == 3
    assert one["accepted"] > 0  # a trained drafter: some drafts are kept
    # four requests together draft 1 token a step, but for steps with fewer requests scheduled
    assert four["draft_tokens"] < 1.5 * four["drafts"] and four["drafts"] > 0
    assert all(b["drafts"] == 0 for b in plain["batches"])


def test_an_engine_that_does_not_start_is_one_line_of_vllms_error(folders, tmp_path):
    target, drafter = folders
    overlapping = {**_emitted(drafter), "num_speculative_tokens_per_batch_size": [[1, 4, 3], [3, 8, 1]]}
    with pytest.raises(VllmError, match=r"^vLLM failed: ValueError: Batch-size ranges must be non-overlapping"):
        _serve(folders, overlapping)
    # a drafter folder vLLM cannot load: an identity vocabulary map it does not expect
    broken = tmp_path / "drafter"
    broken.mkdir()
    (broken / "config.json").write_text((drafter / "config.json").read_text())
    tensors = safetensors.torch.load_file(str(drafter / "model.safetensors"))
    tensors["d2t"] = torch.zeros(tensors["lm_head.weight"].shape[0], dtype=torch.long)
    safetensors.torch.save_file(tensors, str(broken / "model.safetensors"))
    with pytest.raises(VllmError) as failed:
        _serve(folders, {"method": "eagle3", "model": str(broken), "num_speculative_tokens": 2})
    assert "\n" not in str(failed.value) and "draft_id_to_target_id" in str(failed.value)


def test_every_config_emitted_for_this_release_is_accepted_by_its_config_classes(folders, tmp_path):
    """What `autotune --engine vllm --engine-version 0.32.0` can print, over methods, constant and
    per-batch-size schedules, and draft sampling at temperature > 0, in one batch through vLLM's
    own EngineArgs. (Configs for other releases need that release installed: this wheel checks
    its own.)"""
    target, drafter = folders
    draft_model = tmp_path / "small-lm"  # any model folder with the target's vocabulary serves as one
    draft_model.symlink_to(target, target_is_directory=True)
    schedules = [[(1, 256, 3)], [(1, 1, 4), (2, 16, 2), (17, 256, 0)], [(1, 8, 2), (9, 64, 1)]]
    configs = []
    for method, model in (("eagle3", drafter), ("draft_model", draft_model)):
        for schedule in schedules:
            for sampling in (None, "greedy", "sampled"):
                text = emit(
                    "vllm", schedule, model=str(model), method=method, version="0.32.0", draft_sampling=sampling
                ).text
                configs.append(json.loads(shlex.split(text)[1]))
    assert any("num_speculative_tokens_per_batch_size" in c for c in configs)
    assert {c.get("draft_sample_method") for c in configs} == {None, "greedy", "probabilistic"}
    checked = check_configs(vllm_python(), model=str(target), dtype="float32", configs=configs)
    assert checked == [None] * len(configs), [(c, why) for c, why in zip(configs, checked) if why]
