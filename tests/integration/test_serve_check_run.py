"""A serving check through `specfleet run`: real vLLM (its own environment) serves the tiny target
with the config `specfleet autotune --engine vllm` prints for the choice, and a constant-depth
sweep, at every profiled batch size; what it measured lands in the database, MLflow and
`specfleet speedups`. A post-norm drafter, which no stock engine loads, is recorded as refused.
Then the production loop: `specfleet serve` runs vLLM's OpenAI server with the tuned config,
`specfleet autotune --from-metrics` re-tunes from that live server's /metrics, and serving again
serves the stored production version.

Timings on a shared 2-core machine are noise at this size: the verdict's timing part is not held
here (tests/pipeline/core/test_serving_verdict.py holds the rule), only what the engine ran.
"""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
import yaml
from mlflow.tracking import MlflowClient
from support.vllm import vllm_python
from test_end_to_end import specfleet

from db.store import Store
from pipeline.core.contracts import Served

pytestmark = [pytest.mark.vllm, pytest.mark.ray, pytest.mark.slow, pytest.mark.long]


def _spec(python: str) -> dict:
    train = {"ttt_depth": 2, "steps": 40, "batch_size": 8, "seq_len": 64}
    return {
        "name": "served",
        "seed": 0,
        "targets": [
            {
                "name": "t0",
                # two heads of 32: vLLM's CPU attention has no kernel for smaller heads
                "builtin": {
                    "layers": 4,
                    "hidden_size": 64,
                    "heads": 2,
                    "intermediate_size": 128,
                    "vocab_size": 400,
                    "train": {"steps": 60, "lr": 0.003, "batch_size": 8, "seq_len": 64},
                },
            }
        ],
        "drafters": [
            {"name": "pre", "kind": "eagle3", "norm": "pre", "train": train},
            {"name": "post", "kind": "eagle3", "norm": "post", "fc_norm": True, "train": {**train, "steps": 5}},
        ],
        "evaluation": {"max_depth": 2, "num_prompts": 4, "prompt_len": 16, "continuation_len": 12},
        # a cost ratio in the spec, so that these barely trained drafters draft at all
        "cost": {"context_len": 16, "warmup": 1, "repeats": 2, "batch_sizes": [1, 4], "cost_ratio": 0.01},
        "validation": {"num_prompts": 3, "new_tokens": 12},
        "serving": {"python": python, "repeats": 3},
        "resources": {kind: {"num_cpus": 2} for kind in ("profile_cost", "measure_speedup", "serve_check")},
    }


@pytest.fixture(scope="module")
def served_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("served")
    spec = tmp / "served.yaml"
    spec.write_text(yaml.safe_dump(_spec(vllm_python())))
    done = specfleet("run", str(spec), cwd=tmp)
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp


def _results(tmp) -> dict[str, Served]:
    with Store(f"sqlite:///{tmp / '.specfleet' / 'specfleet.db'}") as store:
        jobs = [j for j in store.jobs() if j["kind"] == "serve_check"]
        return {j["name"].split("/")[-1]: Served.model_validate(store.finished_result(j["job_hash"])) for j in jobs}


def test_vllm_serves_the_printed_config_and_the_sweep(served_run):
    served = _results(served_run)
    check = served["pre"].serving_check
    assert check.engine == "vllm 0.32.0" and check.hardware == "cpu 2t x1 float32"
    assert [(p.depth, p.batch_size) for p in check.sweep] == [(k, b) for k in (0, 1, 2) for b in (1, 4)]
    assert all(p.greedy_equal for p in (*check.sweep, *check.chosen))  # vLLM's own plain output, token for token
    for p in check.sweep:  # a constant depth is drafted as asked, at every batch size
        # three prompts and one repeated at batch size 4, decoded three times over within the start
        assert p.depth_run == p.depth and p.tokens == 3 * 12 * 4
        assert [len(row) for row in p.group_seconds] == [4 // p.batch_size] * 3 and min(map(min, p.group_seconds)) > 0
        assert sum(map(sum, p.group_seconds)) == pytest.approx(p.seconds)
        assert 1.0 <= p.accept_len <= 1 + p.depth and len(p.accepted_per_pos) == p.depth
    one = next(p for p in check.chosen if p.batch_size == 1)
    assert one.depth_run == one.depth >= 1
    assert set(check.best_depth) == {1, 4} and check.chosen_vs_best[1] > 0
    for b, (lo, hi) in check.chosen_vs_best_interval.items():  # the repeats give the share an interval
        assert lo <= check.chosen_vs_best[b] <= hi and lo < hi

    # the printed config is what `specfleet autotune` prints for this pairing, but for the folder the
    # drafter was exported to
    printed = json.loads(shlex.split(check.speculative_config)[1])
    autotune = specfleet(
        "autotune",
        "--engine",
        "vllm",
        "--engine-version",
        "0.32.0",
        "--target",
        "t0",
        "--drafter",
        "pre",
        cwd=served_run,
    )
    assert autotune.returncode == 0, autotune.stderr
    expected = json.loads(shlex.split(autotune.stdout)[1])
    assert {**printed, "model": "-"} == {**expected, "model": "-"}


def test_a_drafter_vllm_cannot_load_is_refused_with_why(served_run):
    post = _results(served_run)["post"]
    assert post.serving_check is None and post.refused.startswith("this drafter has no EAGLE-3 engine layout")
    client = MlflowClient(f"sqlite:///{served_run / '.specfleet' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("specfleet/served")
    runs = client.search_runs([experiment.experiment_id], "tags.mlflow.runName = 'serve_check t0/post'")
    assert runs and runs[0].data.tags["refused"] == post.refused


def test_speedups_shows_the_serving_check_and_its_rows(served_run):
    with Store(f"sqlite:///{served_run / '.specfleet' / 'specfleet.db'}") as store:
        rows = [r for r in store.speedup_checks() if r["engine"] != "specfleet"]
    assert {r["drafter"] for r in rows} == {"pre"}
    assert {(r["run"], r["batch_size"]) for r in rows} == {(run, b) for run in ("sweep", "printed") for b in (1, 4)}
    shown = specfleet("speedups", cwd=served_run)
    assert shown.returncode == 0, shown.stderr
    assert "t0/pre served by vllm 0.32.0" in shown.stdout and "verdict: " in shown.stdout
    assert "printed config: --speculative-config" in shown.stdout
    assert "printed config's share of the fastest depth: batch size 1: " in shown.stdout


def _serving(run, *args: str) -> tuple[subprocess.Popen, str]:
    """`specfleet serve` for t0/pre on a free port, and its URL once vLLM answers."""
    server = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "serve", "--target", "t0", "--drafter", "pre", "--port", "0"]
        + ["--python", vllm_python(), "--cpu-threads", "2", "--kv-cache-gib", "1", *args],
        cwd=run,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = server.stdout.readline().strip()  # written once the server answers /health
    if not url:
        server.wait(timeout=60)
        pytest.fail(f"specfleet serve did not come up: {server.stderr.read()[-2000:]}")
    return server, url


def _complete(url: str, n: int) -> None:
    for i in range(n):
        body = json.dumps({"model": "t0", "prompt": f"def f{i}(x):", "max_tokens": 24, "temperature": 0}).encode()
        request = urllib.request.Request(f"{url}/v1/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as answer:
            assert answer.status == 200 and json.load(answer)["choices"][0]["text"] is not None


def _stop(server: subprocess.Popen, url: str) -> str:
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=60)
    with pytest.raises(urllib.error.URLError):  # vLLM went with it
        urllib.request.urlopen(f"{url}/health", timeout=5)
    return server.stderr.read()


def _drafted_per_draft(url: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
        page = answer.read().decode()
    total = {
        name: sum(float(line.split()[-1]) for line in page.splitlines() if line.startswith(f"vllm:{name}_total{{"))
        for name in ("spec_decode_num_draft_tokens", "spec_decode_num_drafts")
    }
    return total["spec_decode_num_draft_tokens"] / total["spec_decode_num_drafts"]


def test_the_production_loop_serves_retunes_from_live_metrics_and_serves_again(served_run):
    with Store(f"sqlite:///{served_run / '.specfleet' / 'specfleet.db'}") as store:
        (offline,) = store.best(target="t0", drafter="pre")
    server, url = _serving(served_run)
    try:
        _complete(url, 6)
        assert _drafted_per_draft(url) == offline["depth"]  # the tuned depth at batch size 1
        drafter = json.loads(
            shlex.split(
                specfleet("autotune", "--engine", "vllm", "--target", "t0", "--drafter", "pre", cwd=served_run).stdout
            )[1]
        )["model"]
        retuned = specfleet(
            "autotune",
            "--engine",
            "vllm",
            "--engine-version",
            "0.32.0",
            "--from-metrics",
            f"{url}/metrics",
            "--drafter",
            "pre",
            "--drafter-path",
            drafter,
            "--cost-ratio",
            "0.01",
            cwd=served_run,
        )
    finally:
        log = _stop(server, url)
    assert f"offline v{offline['version']}, condition default" in log and "serving t0 at http://127.0.0.1:" in log
    assert retuned.returncode == 0, retuned.stderr
    with Store(f"sqlite:///{served_run / '.specfleet' / 'specfleet.db'}") as store:
        (production,) = [r for r in store.best(target="t0", drafter="pre") if r["source"] == "production"]
    assert production["condition"] == "production" and production["created_at"] > offline["created_at"]
    assert f"stored production version {production['version']}" in retuned.stderr

    # served again: the production version is the active one, and vLLM drafts its depth
    server, url = _serving(served_run)
    try:
        _complete(url, 3)
        ran = _drafted_per_draft(url) if production["depth"] else 0.0
    finally:
        log = _stop(server, url)
    assert f"production v{production['version']}, condition production" in log and ran == production["depth"]
