"""Engine configs: for every engine and release, the depth the engine runs at each batch size is
the depth specfleet chose (or, where the release cannot express a schedule, the batch-size-1
depth with a note saying so; TensorRT-LLM from 1.3.0rc8 drafts 1 where 0 was chosen), as the
engines' own reading of the config (engine_semantics.py) says."""

from __future__ import annotations

import itertools

import pytest
from support import engine_semantics as engine

from pipeline.autotune.engines.registry import EngineVersionError, emit
from pipeline.core.schedule import check_schedule, schedule_from_choices
from pipeline.core.trees import shape

FALLING = {1: 5, 8: 5, 16: 4, 32: 3, 64: 1, 128: 0}


def test_schedule_ranges_are_inclusive_contiguous_and_merged():
    schedule = schedule_from_choices(FALLING, 512)
    assert schedule == [(1, 8, 5), (9, 16, 4), (17, 32, 3), (33, 64, 1), (65, 512, 0)]
    check_schedule(schedule)
    assert schedule_from_choices({4: 2}, 4) == [(1, 4, 2)]
    assert schedule_from_choices({4: 2, 100: 1}, 50) == [(1, 50, 2)]  # sizes past the maximum are ignored
    with pytest.raises(ValueError):
        schedule_from_choices({}, 8)


FALLING_SCHEDULE = [(1, 8, 5), (9, 16, 4), (17, 32, 3), (33, 64, 1), (65, 512, 0)]
CONSTANT = [(1, 512, 3)]
RISING = [(1, 4, 2), (5, 512, 3)]
OFF_GRAPH = [(1, 9, 4), (10, 512, 2)]  # 9 is no CUDA-graph capture size: SGLang 0.5.13 pads 9 to 10
RELEASES = {
    "vllm": [
        "0.10.2",
        "0.14.0",
        "0.15.0",
        "0.16.0",
        "0.17.0",
        "0.23.0",
        "0.24.0",
        "0.25.0",
        "0.29.0",
        "0.30.0",
        "0.31.0",
        "0.32.0",
        "0.33.0",
        "0.40.0",
    ],
    "sglang": ["0.5.5", "0.5.10", "0.5.11", "0.5.12", "0.5.13", "0.5.14", "0.5.15", "0.5.18", "0.5.19", "0.5.23"],
    "trtllm": ["1.0.0", "1.1.0", "1.2.0", "1.2.1", "1.3.0rc0", "1.3.0rc7", "1.3.0rc8", "1.4.0rc1"],
    "transformers": ["4.48.0", "5.24.0"],
}
V = pytest.importorskip("packaging.version").Version


def runs_schedule(engine_name: str, version: str, schedule, method: str) -> bool:
    """Whether that release can run this schedule as chosen (from the engines' facts)."""
    if len({k for _, _, k in schedule}) == 1:
        return True
    v = V(version)
    zero = any(k == 0 for _, _, k in schedule)
    padded = v < V("0.5.14") and schedule == OFF_GRAPH
    falls = schedule[0][2] == max(k for _, _, k in schedule)
    v2_drafts_all = v >= V("0.31.0") if method == "draft_model" else V("0.25.0") <= v < V("0.32.0")
    return {
        "vllm": v >= V("0.24.0") and not v2_drafts_all,
        "sglang": method == "eagle3" and v >= V("0.5.13") and (not zero or v >= V("0.5.14")) and not padded,
        "trtllm": method != "dflash" and v >= V("1.2.0") and falls and (method == "draft_model" or v >= V("1.3.0rc8")),
        "transformers": False,
    }[engine_name]


# the first release of each engine that serves a DFlash drafter (transformers: none)
DFLASH_FROM = {"vllm": "0.20.0", "sglang": "0.5.11", "trtllm": "1.3.0rc14"}


def refused_outright(engine_name: str, version: str, method: str) -> bool:
    """Whether no config of that release can serve the method (from the engines' facts)."""
    if method == "dflash":
        return engine_name == "transformers" or V(version) < V(DFLASH_FROM[engine_name])
    return (engine_name, method) == ("transformers", "eagle3") or (
        (engine_name, method) == ("vllm", "draft_model") and V(version) < V("0.15.0")
    )


def depth_in_engine(engine_name, version, emitted, batch_size, tmp_path):
    if engine_name == "vllm":
        return engine.vllm(emitted.text, version, batch_size)[1]
    if engine_name == "sglang":
        return engine.sglang(emitted.text, version, batch_size, files_root=tmp_path)[1]
    if engine_name == "trtllm":
        return engine.trtllm(emitted.text, version, batch_size)[1]
    return engine.transformers(emitted.text, batch_size)


@pytest.mark.parametrize(
    "schedule", [FALLING_SCHEDULE, CONSTANT, RISING, OFF_GRAPH], ids=["falling", "constant", "rising", "off-graph"]
)
@pytest.mark.parametrize("method", ["eagle3", "draft_model", "dflash"])
@pytest.mark.parametrize("engine_name,version", [(e, v) for e, vs in RELEASES.items() for v in vs])
def test_the_engine_runs_the_chosen_depth_at_every_batch_size(engine_name, version, method, schedule, tmp_path):
    try:
        emitted = emit(
            engine_name, schedule, model="/models/drafter", method=method, version=version, config_dir=str(tmp_path)
        )
    except EngineVersionError as exc:  # what a release cannot serve at all is refused, never printed
        assert refused_outright(engine_name, version, method), exc
        return
    assert not refused_outright(engine_name, version, method)
    for name, text in emitted.files.items():
        (tmp_path / name).write_text(text)
    as_chosen = runs_schedule(engine_name, version, schedule, method)
    fallback = [n for n in emitted.notes if "batch-size-1 depth" in n]
    assert bool(fallback) == (not as_chosen), emitted.notes
    floor = 1 if engine_name == "trtllm" and V(version) >= V("1.3.0rc8") else 0  # drafting nothing goes stale
    sizes = range(1, schedule[-1][1] + 1) if engine_name != "transformers" else [1]
    for b in sizes:  # every batch size the schedule covers (TensorRT-LLM drafts nothing past its largest key)
        want = next(k for lo, hi, k in schedule if lo <= b <= hi) if as_chosen else schedule[0][2]
        assert depth_in_engine(engine_name, version, emitted, b, tmp_path) == max(want, floor), (b, emitted.text)
    if engine_name == "vllm":  # the method the engine runs is the one chosen
        assert engine.vllm(emitted.text, version, 1)[0] == method
    newer = V(version) > V(
        {"vllm": "0.33.0", "sglang": "0.5.23", "trtllm": "1.4.0rc1", "transformers": "5.24.0"}[engine_name]
    )
    assert any("newer than the newest release read" in n for n in emitted.notes) == newer


def test_the_interpreters_catch_what_the_old_emitters_wrote(tmp_path):
    """What specfleet printed before engine releases were modelled, read by the engines."""
    # TensorRT-LLM upper-bound keys read by a lower-bound release: batch sizes 2-8 draft 5, not ...
    old = "speculative_config:\n  decoding_type: Eagle3\n  max_draft_len: 5\n  draft_len_schedule: {1: 5}\n"
    with pytest.raises(engine.Misbehaves, match="stale"):  # every batch size above 1 drafts nothing
        engine.trtllm(old, "1.3.0rc8", 2)
    with pytest.raises(engine.Refused):
        engine.trtllm(old.replace("Eagle3", "DraftTarget"), "1.4.0rc1", 1)
    # SGLang: [k-2, k-1, k] candidates make k a ceiling the policy moves under
    (tmp_path / "a.json").write_text('{"1": {"candidate_steps": [3, 4, 5]}}')
    with pytest.raises(AssertionError, match="follows acceptance"):
        engine.sglang(
            "--speculative-algorithm EAGLE3 --speculative-num-steps 5 --speculative-eagle-topk 1 "
            "--speculative-num-draft-tokens 6 --speculative-adaptive --speculative-adaptive-config "
            f"{tmp_path / 'a.json'}",
            "0.5.23",
            1,
        )
    # vLLM refuses the per-batch key before 0.24 (from 0.16 on, unknown keys stop the server)
    arg = (
        '--speculative-config \'{"method":"eagle3","model":"/d","num_speculative_tokens":4,'
        '"num_speculative_tokens_per_batch_size":[[1,8,4],[9,64,2]]}\''
    )
    with pytest.raises(engine.Refused, match="Extra inputs"):
        engine.vllm(arg, "0.23.0", 1)
    assert engine.vllm(arg, "0.24.0", 9) == ("eagle3", 2)
    # SGLang from 0.5.14 pads only to an explicit capture list: one without a range's end moves its batches
    (tmp_path / "b.json").write_text('{"1": {"candidate_steps": [4]}, "10": {"candidate_steps": [2]}}')
    flags = (
        "--speculative-algorithm EAGLE3 --speculative-num-steps 4 --speculative-eagle-topk 1 "
        f"--speculative-num-draft-tokens 5 --speculative-adaptive --speculative-adaptive-config {tmp_path / 'b.json'}"
    )
    assert engine.sglang(flags, "0.5.23", 9) == ("EAGLE3", 4)
    assert engine.sglang(flags, "0.5.23", 9, cuda_graph_bs=[1, 2, 4, 8, 16]) == ("EAGLE3", 2)


def test_what_a_release_cannot_serve_is_an_error_naming_the_option():
    with pytest.raises(EngineVersionError, match="arrived in 0.15.0") as info:
        emit("vllm", CONSTANT, model="/d", method="draft_model", version="0.14.0")
    assert info.value.option == "--engine-version"
    with pytest.raises(EngineVersionError, match="contains 'eagle3'") as info:
        emit("vllm", CONSTANT, model="/exports/llama-eagle3-draft", method="draft_model")
    assert info.value.option == "--drafter-path"
    with pytest.raises(EngineVersionError, match="older than the oldest release"):
        emit("trtllm", CONSTANT, model="/d", method="eagle3", version="0.21.0")
    with pytest.raises(EngineVersionError, match="not a release number"):
        emit("sglang", CONSTANT, model="/d", method="eagle3", version="latest")
    with pytest.raises(EngineVersionError, match="batch-size-1 depth is 0"):
        emit("trtllm", [(1, 1, 0), (2, 64, 2)], model="/d", method="eagle3", version="1.1.0")


@pytest.mark.parametrize("version", RELEASES["vllm"])
@pytest.mark.parametrize("rule", ["sampled", "greedy"])
def test_vllm_draws_drafts_as_the_curve_assumed(version, rule):
    """At temperature > 0 the config makes vLLM draw drafts the way the curve did, or says it cannot."""
    emitted = emit("vllm", CONSTANT, model="/d", method="eagle3", version=version, draft_sampling=rule)
    runs = engine.vllm_draft_sampling(emitted.text, version)  # None: the release has no such setting
    want = {"sampled": "probabilistic", "greedy": "greedy"}[rule]
    noted = any("the curve assumed drafts" in n for n in emitted.notes)
    assert noted == (runs != want), (runs, emitted.notes)
    if V(version) >= V("0.22.0") or (rule == "greedy" and V(version) >= V("0.21.0")):
        assert runs == want
    assert engine.vllm(emitted.text, version, 1) == ("eagle3", 3)  # and the engine starts with it
    greedy_decoding = emit("vllm", CONSTANT, model="/d", method="eagle3", version=version)
    assert "draft_sample_method" not in greedy_decoding.text  # temperature 0: nothing to set, nothing to note
    assert not any("the curve assumed" in n for n in greedy_decoding.notes)


@pytest.mark.parametrize("engine_name", ["sglang", "trtllm"])
def test_engines_without_the_setting_say_so(engine_name):
    emitted = emit(engine_name, CONSTANT, model="/d", method="eagle3", draft_sampling="greedy")
    assert any("does not set how the engine draws them" in n for n in emitted.notes)
    assert not any("draws them" in n for n in emit(engine_name, CONSTANT, model="/d", method="eagle3").notes)


TREE_EVEN = ((0,), (1,), (0, 0), (1, 0))  # every level branches evenly: 2, then 1 per node
TREE_UNEVEN = ((0,), (1,), (2,), (0, 0), (0, 1), (0, 0, 0))


@pytest.mark.parametrize("version", ["0.10.2", "0.14.0", "0.20.2"])
def test_vllm_drafts_the_chosen_tree_where_a_release_can(version):
    out = emit("vllm", [(1, 64, 2)], model="/m/eagle3", method="eagle3", version=version, tree=TREE_EVEN)
    env = {"VLLM_ATTENTION_BACKEND": "TREE_ATTN"} if any("VLLM_ATTENTION_BACKEND" in n for n in out.notes) else {}
    assert engine.vllm_tree(out.text, version, env) == TREE_EVEN
    # a tree that branches unevenly, a release without trees, temperature > 0: the chain, and a note why
    for kwargs, version_, why in (
        ({"tree": TREE_UNEVEN}, version, "unevenly"),
        ({"tree": TREE_EVEN}, "0.24.0", "removed"),
        ({"tree": TREE_EVEN, "draft_sampling": "greedy"}, version, "temperature"),
    ):
        out = emit("vllm", [(1, 64, 2)], model="/m/eagle3", method="eagle3", version=version_, **kwargs)
        assert engine.vllm_tree(out.text, version_) == ((0,), (0, 0)) and any(why in n for n in out.notes)


def test_sglang_and_trtllm_run_the_chosen_trees_bounds_or_the_tree_itself():
    sh = shape(TREE_UNEVEN)
    out = emit("sglang", [(1, 64, 2)], model="/m", method="eagle3", tree=TREE_UNEVEN)
    assert engine.sglang_tree(out.text, "0.5.23") == (sh.depth, sh.topk, sh.nodes + 1)
    out = emit("trtllm", [(1, 64, 2)], model="/m", method="eagle3", version="1.2.1", tree=TREE_UNEVEN)
    assert engine.trtllm_tree(out.text, "1.2.1") == ("static", TREE_UNEVEN)
    out = emit("trtllm", [(1, 64, 2)], model="/m", method="eagle3", version="1.4.0rc1", tree=TREE_UNEVEN)
    assert engine.trtllm_tree(out.text, "1.4.0rc1") == ("dynamic", sh.depth, sh.topk, sh.nodes)
    wide = tuple(n for d in (1, 2, 3) for n in itertools.product(range(2), repeat=d))  # 14 nodes: over SGLang's 10
    out = emit("sglang", [(1, 64, 2)], model="/m", method="eagle3", tree=wide)
    assert engine.sglang(out.text, "0.5.23", 1) == ("EAGLE3", 2) and any("at most" in n for n in out.notes)


@pytest.mark.parametrize("engine_name", ["vllm", "sglang", "trtllm", "transformers"])
def test_a_tree_with_a_depth_per_batch_size_or_a_draft_model_stays_a_chain(engine_name):
    method = "draft_model" if engine_name == "transformers" else "eagle3"
    out = emit(engine_name, [(1, 4, 3), (5, 64, 1)], model="/m", method=method, tree=TREE_EVEN)
    assert any("not written" in n for n in out.notes)
    assert "speculative_token_tree" not in out.text and "eagle_choices" not in out.text and "topk 2" not in out.text
    if engine_name != "transformers":
        out = emit(
            engine_name,
            [(1, 64, 2)],
            model="/m",
            method="draft_model",
            version=None if engine_name != "vllm" else "0.20.2",
            tree=TREE_EVEN,
        )
        assert any("only with EAGLE" in n for n in out.notes)


@pytest.mark.parametrize(
    "engine_name,version,method",
    [
        ("vllm", "0.33.0", "eagle3"),  # trees were removed in 0.21.0
        ("sglang", "0.5.23", "draft_model"),  # trees only with EAGLE drafters
        ("trtllm", "1.2.1", "draft_model"),
        ("transformers", "5.24.0", "draft_model"),  # assisted generation drafts chains only
    ],
)
def test_a_tree_a_release_cannot_run_over_a_chain_of_depth_0_is_no_drafter_at_all(engine_name, version, method):
    """A tree can pay where no chain does (the served shape, chain depth 0); a release that cannot
    run it must not write the chain in its place as a drafter drafting nothing."""
    tree = [(0,)]
    out = emit(engine_name, [(1, 64, 0)], model="/d", method=method, version=version, tree=tree)
    assert out.text == "" and not out.files
    assert "the chosen tree (1 draft token, depth 1, top-1) is not written" in out.notes[0]
    assert out.notes[-1].endswith("drafts nothing (k=0 at every batch size); serve without speculative settings")
    chain = emit(engine_name, [(1, 64, 2)], model="/d", method=method, version=version, tree=tree)
    assert chain.text and not chain.tree_written  # over a chain that drafts, the chain is written as before


def test_a_tree_a_release_runs_is_written_even_over_a_chain_of_depth_0():
    out = emit("vllm", [(1, 64, 0)], model="/d", method="eagle3", version="0.20.0", tree=[(0,), (1,)])
    assert out.tree_written and '"num_speculative_tokens":2' in out.text
