"""The engines' known hazards with a depth per batch size: where a release runs a schedule badly,
what specfleet writes for it avoids the hazard or says what it costs, as the engines' own
reading of the config (engine_semantics.py) says."""

from __future__ import annotations

import pytest
from support import engine_semantics as engine

from pipeline.autotune.engines.registry import emit
from tests.pipeline.autotune.test_engines import CONSTANT, FALLING_SCHEDULE, RELEASES, RISING, V

ZERO_TAIL = [(1, 4, 3), (5, 64, 0)]
ZERO_MIDDLE = [(1, 4, 3), (5, 16, 0), (17, 64, 1)]
SCHEDULES = [FALLING_SCHEDULE, CONSTANT, RISING, ZERO_TAIL, ZERO_MIDDLE]
IDS = ["falling", "constant", "rising", "zero-tail", "zero-middle"]


def _depths(engine_name, version, emitted, schedule, tmp_path) -> list[int]:
    for name, text in emitted.files.items():
        (tmp_path / name).write_text(text)
    read = {
        "vllm": lambda b: engine.vllm(emitted.text, version, b)[1],
        "sglang": lambda b: engine.sglang(emitted.text, version, b, files_root=tmp_path)[1],
    }[engine_name]
    return [read(b) for b in range(1, schedule[-1][1] + 1)]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=IDS)
@pytest.mark.parametrize("method", ["eagle3", "draft_model"])
@pytest.mark.parametrize("engine_name,version", [(e, v) for e in ("vllm", "sglang") for v in RELEASES[e]])
def test_a_range_with_no_drafting_is_noted_where_the_drafter_still_runs(
    engine_name, version, method, schedule, tmp_path
):
    """vLLM (every release with ranges) and SGLang (0.5.14 on) run a drafter forward at a depth of
    0: such batch sizes cost more than plain decoding, and the notes say which they are."""
    if engine_name == "vllm" and method == "draft_model" and V(version) < V("0.15.0"):
        return  # refused: no draft models before 0.15
    emitted = emit(
        engine_name, schedule, model="/models/drafter", method=method, version=version, config_dir=str(tmp_path)
    )
    depths = _depths(engine_name, version, emitted, schedule, tmp_path)
    idle = [b + 1 for b, k in enumerate(depths) if k == 0]
    noted = [n for n in emitted.notes if "cost more than plain decoding" in n]
    assert bool(noted) == bool(idle and engine.drafts_at_depth_zero(engine_name, version)), emitted.notes
    if noted:  # the note names the ranges the engine runs at 0
        assert f"{idle[0]}-" in noted[0] and f"-{idle[-1]}" in noted[0], (idle, noted)


@pytest.mark.parametrize("schedule", SCHEDULES, ids=IDS)
@pytest.mark.parametrize("method", ["eagle3", "draft_model"])
@pytest.mark.parametrize("version", RELEASES["vllm"][2:])
def test_vllm_notes_the_piecewise_cuda_graphs_of_ranges_on_its_v1_runner(version, method, schedule):
    emitted = emit("vllm", schedule, model="/models/drafter", method=method, version=version)
    piecewise = engine.vllm_cuda_graphs(emitted.text, version) == "PIECEWISE"
    assert any("PIECEWISE CUDA graphs instead of full ones" in n for n in emitted.notes) == piecewise


@pytest.mark.parametrize("version", ["0.25.0", "0.29.0", "0.31.0"])
def test_vllm_eagle3_on_the_v2_runner_before_it_reads_the_depth_gets_one_depth(version):
    """The V2 runner's EAGLE speculator drafts num_speculative_tokens every step until 0.32.0: ranges
    would draft the batch-size-1 depth everywhere and verify less (a K=0 range: all of it wasted)."""
    ranges = emit("vllm", FALLING_SCHEDULE, model="/m", method="eagle3", version="0.32.0")
    assert [engine.vllm(ranges.text, version, b)[1] for b in (1, 64, 512)] == [5, 5, 5]  # as the V2 runner reads it
    out = emit("vllm", FALLING_SCHEDULE, model="/m", method="eagle3", version=version)
    assert "num_speculative_tokens_per_batch_size" not in out.text
    assert any("V2 model runner" in n and "batch-size-1 depth 5" in n for n in out.notes)


@pytest.mark.parametrize("version", ["0.5.15", "0.5.18"])
def test_sglang_writes_steps_no_adaptive_candidate_exceeds(version, tmp_path):
    """0.5.15-0.5.18 size a logits buffer by --speculative-num-steps and capture every candidate at
    start-up: a larger candidate stops the server (SGLang issue 30549)."""
    (tmp_path / "a.json").write_text('{"1": {"candidate_steps": [2]}, "5": {"candidate_steps": [3]}}')
    old = (  # what specfleet wrote for RISING: the batch-size-1 depth as the steps
        "--speculative-algorithm EAGLE3 --speculative-num-steps 2 --speculative-eagle-topk 1 "
        f"--speculative-num-draft-tokens 3 --speculative-adaptive --speculative-adaptive-config {tmp_path / 'a.json'}"
    )
    with pytest.raises(engine.Refused, match="shared logits buffer"):
        engine.sglang(old, version, 1)
    assert engine.sglang(old, "0.5.19", 5) == ("EAGLE3", 3)  # fixed there
    assert engine.sglang(old, version, 5, cuda_graph_bs=[1, 2, 4]) == ("EAGLE3", 3)  # 3 captured at no size
    out = emit("sglang", RISING, model="/m", method="eagle3", version=version, config_dir=str(tmp_path))
    for name, text in out.files.items():
        (tmp_path / name).write_text(text)
    assert "--speculative-num-steps 3" in out.text
    assert [engine.sglang(out.text, version, b, files_root=tmp_path)[1] for b in (1, 4, 5, 512)] == [2, 2, 3, 3]


@pytest.mark.parametrize("schedule", [FALLING_SCHEDULE, ZERO_TAIL, ZERO_MIDDLE], ids=IDS[:1] + IDS[3:])
@pytest.mark.parametrize("method", ["eagle3", "draft_model"])
@pytest.mark.parametrize("version", [v for v in RELEASES["trtllm"] if V(v) >= V("1.3.0rc8")])
def test_trtllm_never_writes_a_tier_that_drafts_nothing(version, method, schedule):
    """From 1.3.0rc8 a batch that drafts nothing leaves the drafter's KV cache stale and acceptance
    collapses afterwards: ranges chosen at 0 draft 1, the last key covers the largest batch size,
    and the notes say both."""
    old = "speculative_config:\n  decoding_type: Eagle3\n  max_draft_len: 5\n  draft_len_schedule: {8: 5, 64: 1}\n"
    with pytest.raises(engine.Misbehaves, match="stale"):  # what specfleet wrote: the implicit 0 above 64
        engine.trtllm(old, version, 65)
    out = emit("trtllm", schedule, model="/m", method=method, version=version)
    chosen = [next(k for lo, hi, k in schedule if lo <= b <= hi) for b in range(1, schedule[-1][1] + 1)]
    ran = [engine.trtllm(out.text, version, b)[1] for b in range(1, schedule[-1][1] + 1)]
    assert ran == [max(k, 1) for k in chosen]
    assert any("written as 1" in n for n in out.notes)
    assert any(f"max_batch_size {schedule[-1][1]} or less" in n for n in out.notes)
