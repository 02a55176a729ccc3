"""DFlash block drafters in each engine: the depth verified at every batch size is the one chosen
(or the batch-size-1 depth with a note), the block the engine's drafter fills is the one it was
trained and measured on unless a note says otherwise, and a depth past the block is refused, as
the engines' own reading of the config (engine_semantics.py) says."""

from __future__ import annotations

import json

import pytest
from support import engine_semantics as engine

from pipeline.autotune.engines.registry import EngineVersionError, emit, folder_block_size
from tests.pipeline.autotune.test_engines import DFLASH_FROM, RELEASES, V, runs_schedule

BLOCK = 8
SCHEDULES = {"whole": [(1, 64, BLOCK - 1)], "short": [(1, 64, 3)], "falling": [(1, 4, 3), (5, 64, 1)]}
SERVING = [(e, v) for e in DFLASH_FROM for v in RELEASES[e] if V(v) >= V(DFLASH_FROM[e])]


@pytest.fixture
def drafter_folder(tmp_path):
    folder = tmp_path / "my-drafter"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"], "block_size": BLOCK}))
    return str(folder)


def _block(engine_name: str, text: str, version: str, b: int) -> int:
    if engine_name == "vllm":
        return engine.vllm_dflash_block(text, version, b)
    if engine_name == "sglang":
        return engine.sglang_dflash_block(text, version)
    return engine.trtllm_dflash_block(text, BLOCK)


def _depth(engine_name: str, text: str, version: str, b: int) -> int:
    read = {"vllm": engine.vllm, "sglang": engine.sglang, "trtllm": engine.trtllm}[engine_name]
    return read(text, version, b)[1]


@pytest.mark.parametrize("schedule", list(SCHEDULES.values()), ids=list(SCHEDULES))
@pytest.mark.parametrize("engine_name,version", SERVING)
def test_the_engine_verifies_the_chosen_depth_and_says_when_its_block_is_not_the_trained_one(
    engine_name, version, schedule, drafter_folder
):
    out = emit(engine_name, schedule, model=drafter_folder, method="dflash", version=version)
    as_chosen = runs_schedule(engine_name, version, schedule, "dflash")
    assert any("batch-size-1 depth" in n for n in out.notes) == (not as_chosen), out.notes
    sizes = range(1, schedule[-1][1] + 1)
    for b in sizes:
        want = next(k for lo, hi, k in schedule if lo <= b <= hi) if as_chosen else schedule[0][2]
        assert _depth(engine_name, out.text, version, b) == want, (b, out.text)
    whole = all(_block(engine_name, out.text, version, b) == BLOCK for b in sizes)
    noted = any("drafts a block of" in n for n in out.notes)
    assert whole == (not noted), (out.text, out.notes)
    if engine_name == "vllm" and V(version) >= V("0.32.0"):  # whole blocks, whatever the depth
        assert whole


@pytest.mark.parametrize("schedule", list(SCHEDULES.values()), ids=list(SCHEDULES))
@pytest.mark.parametrize("engine_name,version", SERVING)
def test_a_curve_measured_on_blocks_of_depth_plus_one_is_served_so_or_noted(
    engine_name, version, schedule, drafter_folder
):
    """`block_drafting: depth`: the curve drafted a depth K from a block of K + 1. Wherever the engine
    drafts that block at the depth it verifies, nothing is noted; vLLM 0.32+ drafts the deepest range's
    block at every batch size, so a schedule whose depth falls is noted there, and nowhere else."""
    out = emit(engine_name, schedule, model=drafter_folder, method="dflash", version=version, block_drafting="depth")
    sizes = range(1, schedule[-1][1] + 1)
    as_measured = all(
        _block(engine_name, out.text, version, b) == _depth(engine_name, out.text, version, b) + 1 for b in sizes
    )
    noted = any("drafts a block of" in n for n in out.notes)
    assert as_measured == (not noted), (out.text, out.notes)
    falls = len({k for _, _, k in schedule}) > 1
    runs_ranges = runs_schedule(engine_name, version, schedule, "dflash")
    assert as_measured == (not (falls and runs_ranges and engine_name == "vllm" and V(version) >= V("0.32.0")))


@pytest.mark.parametrize("engine_name,version", SERVING)
def test_a_depth_past_the_trained_block_is_refused_naming_the_drafter(engine_name, version, drafter_folder):
    with pytest.raises(EngineVersionError, match="drafts at most 7 tokens, not 8") as info:
        emit(engine_name, [(1, 64, BLOCK)], model=drafter_folder, method="dflash", version=version)
    assert info.value.option == "--drafter-path"
    # the engine would refuse it too, or draft past what the drafter was trained on
    unchecked = emit(engine_name, [(1, 64, BLOCK)], model="hub/some-dflash", method="dflash", version=version)
    if engine_name == "trtllm":
        with pytest.raises(engine.Refused, match="trained with block_size=8"):
            engine.trtllm_dflash_block(unchecked.text, BLOCK)
    else:
        assert _block(engine_name, unchecked.text, version, 1) > BLOCK


@pytest.mark.parametrize("engine_name", list(DFLASH_FROM))
def test_each_engine_refuses_dflash_before_its_first_release(engine_name):
    older = [v for v in RELEASES[engine_name] if V(v) < V(DFLASH_FROM[engine_name])]
    assert older
    for version in older:
        with pytest.raises(EngineVersionError, match="cannot serve a DFlash drafter") as info:
            emit(engine_name, SCHEDULES["short"], model="/d", method="dflash", version=version)
        assert info.value.option == "--engine-version"
    with pytest.raises(EngineVersionError, match="this drafter is dflash") as info:
        emit("transformers", SCHEDULES["short"], model="/d", method="dflash")
    assert info.value.option == "--engine"


def test_a_block_not_known_here_is_said_and_the_chain_is_never_a_tree():
    out = emit("vllm", SCHEDULES["short"], model="hub/some-dflash", method="dflash", version="0.33.0")
    assert engine.vllm(out.text, "0.33.0", 1) == ("dflash", 3)
    assert engine.vllm_dflash_block(out.text, "0.33.0", 1) == 4
    assert any("not known here" in n for n in out.notes)
    tree = ((0,), (1,), (0, 0))
    out = emit("vllm", [(1, 64, 2)], model="hub/x", method="dflash", version="0.20.2", tree=tree)
    assert engine.vllm_tree(out.text, "0.20.2", {"VLLM_ATTENTION_BACKEND": "TREE_ATTN"}) == ((0,), (0, 0))
    assert any("never a tree" in n for n in out.notes)


def test_the_block_size_is_read_where_the_engines_read_it(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    config = folder / "config.json"
    config.write_text(json.dumps({"block_size": 16, "dflash_config": {"block_size": 10}}))
    assert folder_block_size(str(folder)) == 10  # dflash_config first, as SGLang reads it
    config.write_text(json.dumps({"block_size": 16}))
    assert folder_block_size(str(folder)) == 16
    for bad in ("{not json", "[1, 2]", '{"block_size": true}', '{"block_size": 1}'):
        config.write_text(bad)
        assert folder_block_size(str(folder)) is None
    assert folder_block_size(str(tmp_path / "absent")) is None
