"""The summary `specfleet report` opens with (pipeline/report/summary.py): per pairing, what to
serve (a depth, a depth per batch size, the tree only where the tree is served, or no
speculation), the engine flags `specfleet autotune` prints for it, the verdict and the gain; and
the page around it: hashes and run ids only in the appendix, "1 token" for one."""

from __future__ import annotations

import json

from pipeline.autotune.tuning import render
from pipeline.core import contracts as c
from pipeline.core import tree_contracts as tc
from pipeline.core.types import DepthChoice
from pipeline.report.data import ExperimentRecord, PairingResults, load_experiment
from pipeline.report.engine_flags import DRAFTER_PATH
from pipeline.report.page import experiment_page
from pipeline.report.summary import pairing_summary

SPEEDUPS = (1.0, 1.21, 1.352, 1.10, 0.95)
TREE = ((0,), (1,), (0, 0))  # 3 draft tokens, depth 2, top-2


def _selected(k: int, schedule=None, batch_depths=None, tree=None, speedups=SPEEDUPS) -> c.Selected:
    choice = DepthChoice(depth=k, accept_len=1.8, speedup=speedups[k], cost_ratio=0.1, speedups=speedups)
    return c.Selected(
        choice=choice,
        hardware="cpu 2t",
        condition="template+bos",
        temperature=0.0,
        schedule=schedule,
        batch_depths=batch_depths,
        tree=tree,
    )


def _tree(nodes, speedup: float, chain_depth: int, chain_speedup: float) -> tc.TreeChoice:
    candidates = tuple(
        tc.TreeCandidate(tree=nodes[:n], decode_accept_len=1.0 + 0.4 * n, speedups=(1.0 + 0.03 * n, 1.0))
        for n in range(len(nodes) + 1)
    )
    return tc.TreeChoice(
        tree=nodes,
        decode_accept_len=2.2,
        speedup=speedup,
        best_point=len(nodes),
        chain_depth=chain_depth,
        chain_decode_accept_len=1.9,
        chain_speedup=chain_speedup,
        candidates=candidates,
        batch_budgets={1: len(nodes), 8: len(nodes)},
        chain_speedups=(chain_speedup, 1.0),
    )


def _check(chosen: int, measured, *, passed=True, problems=(), tree=None) -> c.Validated:
    best = max(range(len(measured)), key=lambda k: measured[k])
    return c.Validated(
        speedup_check=c.SpeedupCheck(
            condition="template+bos",
            temperature=0.0,
            tokens_per_s=tuple(20.0 * m for m in measured),
            measured_speedup=tuple(measured),
            engine_accept_len=(1.0,) * len(measured),
            greedy_mismatches=0,
            tokens=(100,) * len(measured),
            seconds=(5.0,) * len(measured),
            predicted_speedup=SPEEDUPS[: len(measured)],
            chosen_depth=chosen,
            best_measured_depth=best,
            chosen_vs_best=measured[chosen] / measured[best],
            tolerance=0.05,
            hardware="cpu 2t",
            cost_hardware="cpu 2t",
            passed=passed,
            problems=problems,
            tree=tree,
        )
    )


def _tree_check(measured_tree: float) -> c.TreeCheck:
    return c.TreeCheck(
        trees=(TREE,),
        tokens_per_s=(20.0 * measured_tree,),
        engine_accept_len=(2.1,),
        decode_accept_len=(2.2,),
        predicted_speedup=(1.12,),
        measured_speedup=(measured_tree,),
        plain_tokens_per_s=20.0,
        chain_depth=0,
        chain_tokens_per_s=20.0,
        chain_predicted_speedup=1.0,
        greedy_mismatches=0,
    )


def _point(k: int, b: int, speedup: float) -> c.ServedPoint:
    return c.ServedPoint(
        depth=k,
        batch_size=b,
        tokens_per_s=10.0 * speedup,
        measured_speedup=speedup,
        predicted_speedup=1.2,
        accept_len=1.5,
        curve_accept_len=1.6,
        accepted_per_pos=(0.5,) * k,
        depth_run=float(k),
        greedy_equal=True,
        seconds=1.0,
        tokens=10,
    )


def _served(passed: bool) -> c.Served:
    return c.Served(
        serving_check=c.ServingCheck(
            engine="vllm 0.32.0",
            speculative_config="--speculative-config '{...}'",
            condition="template+bos",
            temperature=0.0,
            hardware="cpu 2t",
            cost_hardware="cpu 2t",
            sweep=(_point(0, 1, 1.0), _point(2, 1, 1.2), _point(0, 8, 1.0), _point(1, 8, 1.1)),
            chosen=(_point(1, 8, 1.05), _point(2, 1, 1.16)),
            best_depth={1: 2, 8: 1},
            chosen_vs_best={1: 0.967, 8: 0.955},
            tolerance=0.05,
            passed=passed,
            problems=() if passed else ("batch size 8: the printed config (k=1) reaches 90.0% of k=1",),
        )
    )


def _pairing(selected, **results) -> PairingResults:
    return PairingResults("smol", "eagle", selected=selected, drafter_kind="eagle3", **results)


def test_a_depth_per_batch_size_is_said_with_its_verdicts_gain_and_the_flags_autotune_prints():
    schedule = ((1, 1, 2), (2, 8, 1))
    pairing = _pairing(
        _selected(2, schedule=schedule, batch_depths={1: 2, 8: 1}),
        validated=_check(2, (1.0, 1.15, 1.201, 0.9, 0.8)),
        served=_served(passed=True),
        held_out_prompts=8,
    )
    summary = pairing_summary(pairing)
    serve, ours, theirs, gain, flags_intro = summary.sentences
    assert serve == "Serve a depth per batch size: k = 2 at batch size 1, k = 1 at batch sizes 2-8."
    assert ours == (
        "Verdict of specfleet's engine on cpu 2t: passed: the chosen depth reaches 100.0% of the best measured "
        "tokens/s."
    )
    assert theirs == (
        "Verdict of vllm 0.32.0 on cpu 2t: passed: the printed config reaches 96.7% of the engine's fastest depth "
        "at batch size 1, 95.5% at batch size 8."
    )
    assert gain == (
        "Gain at batch size 1: predicted 1.35x, measured 1.20x on 8 held-out prompts by specfleet's engine. "
        "vllm 0.32.0 measured 1.16x at batch size 1 and 1.05x at batch size 8 with the printed config."
    )
    assert "specfleet autotune --engine ENGINE --target smol --drafter eagle" in flags_intro
    by_engine = {f.engine.split()[0]: f for f in summary.flags}
    assert set(by_engine) == {"vllm", "sglang", "trtllm", "transformers"}
    # what `specfleet autotune --engine vllm` prints for this choice, word for word
    printed = render("vllm", list(schedule), model=DRAFTER_PATH, method="eagle3").text
    assert by_engine["vllm"].text == printed.rstrip("\n")
    assert '"num_speculative_tokens_per_batch_size":[[1,1,2],[2,8,1]]' in printed
    assert by_engine["transformers"].refused.startswith("HF assisted generation drafts with a standalone")
    sglang = by_engine["sglang"]
    (path,) = sglang.files
    assert path.startswith("engine-configs/sglang-adaptive-") and path in sglang.text
    assert json.loads(sglang.files[path]) == {"1": {"candidate_steps": [2]}, "2": {"candidate_steps": [1]}}
    markdown, page = summary.markdown(), summary.html()
    assert f"```\n{printed.rstrip()}\n```" in markdown and "transformers 5.24.0: not served:" in markdown
    assert "<pre>--speculative-config" in page and "&#x27;" in page  # the JSON's quotes escaped


def test_one_depth_without_validation_says_1_token_not_validated_and_what_is_extrapolated():
    pairing = _pairing(_selected(1, schedule=((1, 256, 1),), batch_depths={1: 1, 8: 1}))
    serve, verdict, gain, _ = pairing_summary(pairing).sentences
    assert serve == (
        "Serve the chain at depth k = 1 (1 draft token per step) at every batch size; batch sizes 9-256 keep "
        "k = 1 unmeasured (depths were measured up to batch size 8)."
    )
    assert verdict == "Verdict: not validated (no speedup or serving check ran)."
    assert gain == "Gain at batch size 1: predicted 1.21x, not measured."


def test_a_served_tree_is_what_the_summary_serves_and_measures():
    tree = _tree(TREE, speedup=1.12, chain_depth=0, chain_speedup=1.0)
    pairing = _pairing(
        _selected(0, schedule=((1, 256, 0),), batch_depths={1: 0, 8: 0}, tree=tree),
        validated=_check(0, (1.0, 0.9, 0.85), tree=_tree_check(1.04)),
        held_out_prompts=8,
    )
    summary = pairing_summary(pairing)
    serve, verdict, gain, _ = summary.sentences
    assert serve == (
        "Serve the draft tree of 3 tokens, depth 2, top-2 at every batch size: it is predicted to run 1.12x as "
        "fast as the chain at depth k = 0."
    )
    assert (
        verdict
        == "Verdict of specfleet's engine on cpu 2t: passed: the served tree is within 5% of the best shape measured."
    )
    assert gain == "Gain at batch size 1: predicted 1.12x, measured 1.04x on 8 held-out prompts by specfleet's engine."
    trtllm = next(f for f in summary.flags if f.engine.startswith("trtllm"))
    assert "eagle_choices" in trtllm.text  # the tree itself goes to an engine that runs it


def test_a_tree_the_chain_beats_is_not_what_the_summary_serves():
    tree = _tree(TREE, speedup=1.30, chain_depth=2, chain_speedup=1.352)
    summary = pairing_summary(_pairing(_selected(2, schedule=((1, 8, 2),), batch_depths={1: 2, 8: 2}, tree=tree)))
    assert summary.sentences[0] == "Serve the chain at depth k = 2 (2 draft tokens per step) at every batch size."
    assert summary.sentences[2] == "Gain at batch size 1: predicted 1.35x, not measured."
    assert not any("tree" in s for s in summary.sentences)
    trtllm = next(f for f in summary.flags if f.engine.startswith("trtllm"))
    assert "eagle_choices" not in trtllm.text


def test_depth_0_says_no_speculation_no_flags_and_a_failed_verdict_with_its_reason():
    problems = ("the chosen depth reaches 92.0% of the best measured tokens/s",)
    pairing = _pairing(
        _selected(0, schedule=((1, 256, 0),), batch_depths={1: 0, 8: 0}, speedups=(1.0, 0.95, 0.9)),
        validated=_check(0, (1.0, 1.087, 1.05), passed=False, problems=problems),
        served=c.Served(serving_check=None, refused="eagle3: no post-norm layer in vLLM"),
        held_out_prompts=8,
    )
    summary = pairing_summary(pairing)
    serve, ours, theirs, gain, flags = summary.sentences
    assert serve == "Serve without speculation: plain decoding (k = 0) is predicted fastest at every batch size."
    assert ours == f"Verdict of specfleet's engine on cpu 2t: failed: {problems[0]}."
    assert theirs == "Verdict of the serving engine: it cannot serve this drafter: eagle3: no post-norm layer in vLLM."
    assert gain == (
        "Gain: none; plain decoding is predicted fastest. Specfleet's engine measured k = 1 fastest (1.09x) on "
        "8 held-out prompts."
    )
    assert flags == "Engine flags: none; start the engine without a drafter." and summary.flags == ()


def test_a_failed_serving_check_is_said_with_its_reason():
    pairing = _pairing(_selected(2, schedule=((1, 8, 2),), batch_depths={1: 2, 8: 2}), served=_served(passed=False))
    verdict = pairing_summary(pairing).sentences[1]
    assert (
        verdict
        == "Verdict of vllm 0.32.0 on cpu 2t: failed: batch size 8: the printed config (k=1) reaches 90.0% of k=1."
    )


def _tuned_row(selected: c.Selected) -> dict:
    tree = selected.tree
    return {
        "target": "smol",
        "drafter": "eagle",
        "hardware": "cpu 2t",
        "timed_by": "specfleet",
        "condition": "template+bos",
        "temperature": 0.0,
        "depth": selected.choice.depth,
        "speedup": selected.choice.speedup,
        "schedule": [list(r) for r in selected.schedule],
        "schedule_measured_to": selected.schedule_measured_to,
        "tree": [list(n) for n in tree.tree],
        "tree_speedup": tree.speedup,
        "tree_chain_speedup": tree.chain_speedup,
        "tree_all_batches": tree.all_batches,
        "version": 1,
        "active": True,
        "source": "offline",
        "job_hash": "feedc0ffee" * 6 + "abcd",
        "mlflow_run_id": "0123456789abcdef0123456789abcdef",
        "code_version": "0.1.0+16e2ea774d88",
    }


def test_the_page_opens_with_the_summary_keeps_hashes_to_the_appendix_and_says_1_token(tmp_path):
    one = ((0,),)  # a one-token tree the chain at k=2 beats: analysis only
    selected = _selected(2, schedule=((1, 8, 2),), batch_depths={1: 2, 8: 2}, tree=_tree(one, 1.2, 2, 1.352))
    printed = """--speculative-config '{"model":"/ckpt/7a2b09d47e17d5c4","num_speculative_tokens":2}'"""
    record = ExperimentRecord(
        id=1,
        name="e",
        spec_hash="5bec" * 16,
        code_version="0.1.0+16e2ea774d88",
        created_at="2026-12-04T13:40:26+00:00",
        mlflow_run_id="75c24c04b2994a00a7c472a270b93310",
        job_counts={"done": 3},
        pairings=(
            _pairing(
                selected,
                validated=_check(2, (1.0, 1.1, 1.2, 0.9, 0.8)),
                served=c.Served(
                    serving_check=_served(True).serving_check.model_copy(update={"speculative_config": printed})
                ),
                held_out_prompts=8,
            ),
        ),
        tuned=(_tuned_row(selected),),
        skipped=(),
    )
    page = experiment_page(record, tmp_path)
    page.write("specfleet report: e")
    markdown, html = (tmp_path / "tables.md").read_text(), (tmp_path / "report.html").read_text()
    assert markdown.split("\n\n")[1] == "### Summary" and html.index("<h2>Summary</h2>") < html.index("<table>")
    for text in (markdown, html):
        body, appendix = text.split("Appendix: provenance")
        for provenance in (
            "5bec5bec",
            "75c24c04b2994a00",
            "feedc0ffee",
            "0123456789abcdef",
            "16e2ea774d88",
            "7a2b09d4",
        ):
            assert provenance not in body and provenance in appendix
        assert "1 tokens" not in text and "1 token, depth 1, top-1" in text
    tuned = markdown.split("**Tuned configs written")[1].split("\n\n")[1].splitlines()
    assert tuned[0].split(" | ")[9] == "tree served" and tuned[2].split(" | ")[9] == ""  # the chain is served
    trees = markdown.split("**Draft trees")[1].split("\n\n")[1].splitlines()
    assert trees[2].startswith("| smol/eagle | the chain (k=2) | 1 token, depth 1, top-1 |")


class _Store:
    """What load_experiment reads of a database: one experiment, a choice and its speedup check."""

    def __init__(self, jobs):
        self._jobs = jobs

    def experiments(self):
        return [{"id": 1, "name": "e", "spec_hash": "h", "code_version": "v", "created_at": "now",
                 "mlflow_run_id": None, "job_counts": {}}]  # fmt: skip

    def experiment_results(self, experiment_id):
        return [dict(j) for j in self._jobs]

    def best(self, history=False):
        return []


def test_the_record_holds_the_drafter_kind_and_the_held_out_prompts_from_the_job_configs():
    def job(kind, config, result):
        result = result.model_dump(mode="json")
        return {"job_hash": kind, "kind": kind, "name": kind, "mlflow_run_id": None, "duration_s": 1.0,
                "finished_at": kind, "config": {"seed": 0, **config}, "result": result}  # fmt: skip

    selected = _selected(2, schedule=((1, 8, 2),), batch_depths={1: 2, 8: 2})
    drafter = {"name": "eagle", "kind": "standalone"}
    store = _Store(
        [
            job("select_depth", {"target": "smol", "drafter": "eagle"}, selected),
            job(
                "measure_speedup",
                {"target": {"name": "smol"}, "drafter": drafter, "validation": {"num_prompts": 6}},
                _check(2, (1.0, 1.1, 1.2, 0.9, 0.8)),
            ),
        ]
    )
    (pairing,) = load_experiment(store, "e").pairings
    assert (pairing.drafter_kind, pairing.held_out_prompts) == ("standalone", 6)
    summary = pairing_summary(pairing)
    assert "on 6 held-out prompts" in summary.sentences[2]
    transformers = next(f for f in summary.flags if f.engine.startswith("transformers"))
    assert transformers.refused is None and '"num_assistant_tokens": 2' in transformers.text  # a draft model


def test_each_drafter_kind_is_served_as_its_family_says():
    from pipeline.report.engine_flags import SERVED_AS
    from workers.drafters.registry import FAMILIES, family_of

    assert {kind: family_of(kind).method for kind in FAMILIES} == SERVED_AS
