"""The pieces `specfleet bench` builds on (the bench itself is run by hand, not here): the target-pass
counter, the table of ratios, and its `specfleet run` keeping every store in its work directory."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from workers.decoding.chain import generate
from workers.drafters.chain.proposer import ChainProposer
from workers.measure.bench import target_passes


def test_the_pass_counter_sees_every_target_pass_of_the_engine_and_nothing_of_the_drafter(tiny_target, tiny_drafters):
    target, _, _ = tiny_target
    drafter = tiny_drafters["post"][0]
    prompt = torch.arange(5, 17)[None]
    for depth in (0, 3):
        timing: dict = {}
        with target_passes(target) as counted:
            generate(target, ChainProposer(drafter), prompt, max_new=12, depth=depth, temperature=0.0, timing=timing)
        assert counted["passes"] == timing["passes"] + 1  # the prompt's pass, then one per verification
        # the prompt's tokens, then the last token and its drafts at every verification
        assert counted["tokens"] == prompt.numel() + timing["passes"] * (depth + 1)
        assert counted["seconds"] > 0
    with target_passes(target) as counted:
        pass
    assert counted["passes"] == 0 and not target._forward_hooks and not target._forward_pre_hooks


def test_the_bench_table_divides_what_it_says():
    from pipeline.bench.table import bench_tables

    results = {
        "machine": {"cpus": 2, "processor": "x86_64", "torch": "2.x"},
        "seconds": 600.0,
        "experiment": {"pairing": "t/d"},
        "curve_cost": {
            "positions": 100,
            "max_depth": 4,
            "curve": {"target_passes": 50, "seconds": 2.0},
            "sweep": {"target_passes": 400, "seconds": 8.0},
            "lower_bound": {"target_passes": 100, "seconds": 1.0},
        },
        "engine": {
            "chosen_depth": 2,
            "engine_plain_tokens_per_s": 90.0,
            "hf_plain_tokens_per_s": 60.0,
            "engine_chosen_tokens_per_s": 120.0,
            "engine_plain_over_hf": 1.5,
            "engine_chosen_over_hf": 2.0,
            "engine_chosen_over_plain": 120 / 90,
        },
        "autotune": {
            "choose_s": 30.0,
            "brute_force_s": 120.0,
            "choose_over_brute_force": 0.25,
            "chosen_depth": 2,
            "brute_force_depth": 3,
            "best_held_out_depth": 2,
            "chosen_regret": 0.0,
            "brute_force_regret": 0.05,
        },
        "orchestration": {
            "jobs": 200,
            "ray_ms_per_job": 30.0,
            "direct_ms_per_job": 10.0,
            "ray_overhead_ms": 20.0,
            "ray_overhead_share": 2.0,
            "local_ms_per_job": 15.0,
            "local_overhead_ms": 5.0,
            "local_overhead_share": 0.5,
        },
        "training": [
            {"ttt_depth": 1, "features": "target pass (chat)", "tokens_per_s": 1000.0, "target_forward_share": 0.4},
            {"ttt_depth": 1, "features": "cached", "tokens_per_s": 1600.0, "target_forward_share": 0.0},
        ],
    }
    ratios, training = bench_tables(results)
    cells = {(row[0], row[2].split(" ")[0]): row[3] for row in ratios.rows}
    assert cells[("curve cost, target passes (accept_len(k), k <= 4, 100 positions)", "400")] == "0.125x"
    assert cells[("curve cost, target passes", "100")] == "0.5x"
    assert cells[("engine: plain decoding (above 1: faster than HF)", "60.0")] == "1.5x"
    assert cells[("autotune: cost of choosing k", "120.0")] == "0.25x"
    assert "+20.0 ms (2x the job's time)" in {row[3] for row in ratios.rows}
    assert training.rows == (("1", "1000 (40%)", "1600 (0%)", "1.6x"),)
    assert "| 1 | 1000 (40%) | 1600 (0%) | 1.6x |" in training.markdown()
    row = {"cpus_per_worker": 2.0, "tokens_per_s": 2000.0, "checkpoint_seconds": 0.0, "wall_seconds": 5.0}
    two = {"cpus_per_worker": 1.0, "tokens_per_s": 1500.0, "checkpoint_seconds": 7.3, "wall_seconds": 30.0}
    results["training_groups"] = [
        {**row, "layout": "one process", "val_loss": 2.5},
        {**two, "layout": "2 ddp workers", "val_loss": 2.5},
    ]
    *_, groups = bench_tables(results)
    assert groups.rows[1] == ("2 ddp workers", "1", "1500", "0.75x", "7.3 s", "30.0 s", "2.5000")


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.long
def test_the_bench_run_keeps_every_store_in_its_work_directory(tmp_path, monkeypatch):
    """MLflow's artifacts too: nothing lands in the folder the bench was started from (./mlruns)."""
    import yaml

    from pipeline.bench.suite import _run_experiment
    from tests.integration.test_driver_memory import TINY, _spec

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'shared-mlflow.db'}")  # a user's own: not used
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(_spec("tinybench", TINY)))
    _run_experiment(Path("tiny.yaml"), Path("wd"), lambda line: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml", "wd"]
    assert any((tmp_path / "wd" / "mlflow-artifacts").rglob("worker.log"))
