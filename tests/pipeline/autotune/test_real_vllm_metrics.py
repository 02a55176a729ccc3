"""The production-metrics path on vLLM expositions taken from real servers (tests/data/vllm_metrics).

dflash_k7_window.prom: the counter window of a real k = 7 run; pr41916_partial.prom: a real scrape
whose public copy stops before the accepted counters; dgx_spark_trimmed.prom: a real capture
trimmed to positions 0..3 of a k = 5 deployment. The CLI is run as a user runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import DATA as TESTS_DATA

from pipeline.autotune.prod_metrics import parse_counters, production_curve
from pipeline.core.choice import curve_speedup
from pipeline.errors import UserError

DATA = TESTS_DATA / "vllm_metrics"
DFLASH = DATA / "dflash_k7_window.prom"
PER_POS = (4214, 2532, 1350, 888, 566, 370, 210)


def test_real_window_gives_survival_per_position():
    counters = parse_counters(DFLASH.read_text())
    assert counters.model_name == "qwen3.5-9b-allava-val-weight-test"
    assert (counters.num_drafts, counters.num_draft_tokens, counters.num_accepted_tokens) == (6274, 43918, 10130)
    assert counters.accepted_per_pos == PER_POS
    curve = production_curve(counters, temperature=0.0)
    assert curve.survival == pytest.approx([a / 6274 for a in PER_POS])
    assert curve.accept_len[-1] == pytest.approx(1 + 10130 / 6274)  # 2.615 tokens per target pass at k = 7


@pytest.mark.parametrize(
    "name,message",
    [
        ("pr41916_partial.prom", "no vllm:spec_decode_num_accepted_tokens_total counter"),
        ("dgx_spark_trimmed.prom", r"positions \[4\] are missing"),
    ],
)
def test_real_but_incomplete_scrapes_are_refused_clearly(name, message):
    with pytest.raises(UserError, match=message):
        parse_counters((DATA / name).read_text())


def _cli(*args, workdir: Path):
    exe = Path(sys.executable).with_name("specfleet")
    env = {**os.environ, "SPECFLEET_DB": f"sqlite:///{workdir / 'db.sqlite'}"}
    return subprocess.run(
        [str(exe), *args, "--workdir", str(workdir)], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.mark.slow
def test_autotune_cli_from_a_real_metrics_window(tmp_path):
    drafter = tmp_path / "dflash-drafter"  # an EAGLE-3 checkpoint's folder, as the engine would load it
    drafter.mkdir()
    (drafter / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    done = _cli(
        "autotune",
        "--engine",
        "vllm",
        "--from-metrics",
        str(DFLASH),
        "--cost-ratio",
        "0.1",
        "--drafter-path",
        str(drafter),
        "--method",
        "eagle3",
        workdir=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    speedups = curve_speedup([1.0] + [1 + sum(PER_POS[:j]) / 6274 for j in range(1, 8)], 0.1)
    best = max(range(8), key=lambda k: (speedups[k], -k))
    flag, quoted = done.stdout.strip().split(" ", 1)
    assert flag == "--speculative-config" and quoted[0] == quoted[-1] == "'"
    config = json.loads(quoted[1:-1])
    assert config == {"method": "eagle3", "model": str(drafter), "num_speculative_tokens": best}
    assert best == 3 and "stored production version 1" in done.stderr

    shown = _cli("best", "--json", "--history", workdir=tmp_path)
    (row,) = json.loads(shown.stdout)
    assert (row["target"], row["drafter"], row["source"], row["depth"]) == (
        "qwen3.5-9b-allava-val-weight-test",
        "dflash-drafter",
        "production",
        3,
    )

    bad = _cli(
        "autotune",
        "--engine",
        "vllm",
        "--from-metrics",
        str(DATA / "dgx_spark_trimmed.prom"),
        "--cost-ratio",
        "0.1",
        "--drafter-path",
        str(drafter),
        workdir=tmp_path,
    )
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "positions [4] are missing" in bad.stderr
    again = _cli("best", "--json", "--history", workdir=tmp_path)
    assert len(json.loads(again.stdout)) == 1  # the refused scrape stored nothing

    # drafting as dear as a target step: no depth pays, so no config, a note, and a stored version 2
    dear = _cli(
        "autotune",
        "--engine",
        "vllm",
        "--from-metrics",
        str(DFLASH),
        "--cost-ratio",
        "1.0",
        "--drafter-path",
        str(drafter),
        workdir=tmp_path,
    )
    assert dear.returncode == 0 and dear.stdout == "" and "speculation does not pay" in dear.stderr
    rows = json.loads(_cli("best", "--json", workdir=tmp_path).stdout)
    assert [(r["version"], r["depth"]) for r in rows] == [(2, 0)]
