"""One tiny spec through a real two-node Ray cluster, real MLflow and the real database."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from db.store import Store
from pipeline.core.files import dir_hash

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # tests/README.md: markers

SPEC = {
    "name": "e2e",
    "seed": 0,
    "targets": [
        {
            "name": "t0",
            "builtin": {
                "layers": 4,
                "hidden_size": 64,
                "heads": 4,
                "intermediate_size": 128,
                "vocab_size": 400,
                "train": {"steps": 30, "lr": 0.003, "batch_size": 8, "seq_len": 64},
            },
        }
    ],
    "drafters": [
        {
            "name": "pre",
            "kind": "eagle3",
            "norm": "pre",
            "train": {"ttt_depth": 2, "steps": 10, "batch_size": 8, "seq_len": 64},
        },
        {
            "name": "post",
            "kind": "eagle3",
            "norm": "post",
            "fc_norm": True,
            "train": {"ttt_depth": 2, "steps": 10, "batch_size": 8, "seq_len": 64},
        },
    ],
    "evaluation": {"max_depth": 3, "num_prompts": 4, "prompt_len": 16, "continuation_len": 8},
    # a cost ratio given in the spec replaces the timed one, so these barely trained drafters still draft
    "cost": {
        "context_len": 16,
        "warmup": 1,
        "repeats": 2,
        "batch_sizes": [1, 4],
        "max_batch_size": 16,
        "cost_ratio": 0.01,
    },
    "validation": {"num_prompts": 2, "new_tokens": 8, "warmup_prompts": 0},
}


def specfleet(*args, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, ray_cluster):
    """The spec run once on the two-node cluster; the checks below read what it left."""
    tmp_path = tmp_path_factory.mktemp("e2e")
    spec = tmp_path / "e2e.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    done = specfleet("run", str(spec), "--address", ray_cluster, cwd=tmp_path)
    return tmp_path, spec, done


def _store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / '.specfleet' / 'specfleet.db'}")


def _mlflow(tmp_path: Path):
    client = MlflowClient(f"sqlite:///{tmp_path / '.specfleet' / 'mlflow.db'}")
    return client, client.get_experiment_by_name("specfleet/e2e")


def test_every_job_runs_on_the_cluster(first_run):
    _, _, done = first_run
    assert done.returncode == 0, done.stderr[-3000:]
    assert "11 ran, 0 reused, 0 failed" in done.stdout
    assert "predicted vs measured speedup" in done.stdout


def test_the_database_holds_every_job_curve_choice_and_benchmark(first_run):
    tmp_path, _, _ = first_run
    store = _store(tmp_path)
    jobs = store.jobs()
    assert len(jobs) == 11 and {j["status"] for j in jobs} == {"done"}
    assert all(j["attempts"] == 1 and j["mlflow_run_id"] for j in jobs)
    trained = [store.finished_result(j["job_hash"]) for j in jobs if j["kind"].startswith("train")]
    assert all(Path(t["files_uri"]).is_absolute() for t in trained)  # reusable from any folder
    assert sorted(t["family"] or "" for t in trained) == ["", "eagle3", "eagle3"]
    best = store.best()
    assert {(r["target"], r["drafter"]) for r in best} == {("t0", "pre"), ("t0", "post")}
    for row in best:
        assert row["depth"] <= 3 and row["hardware"].startswith("cpu")
        curve = store.curves(target="t0", drafter=row["drafter"])
        assert [c["depth"] for c in curve] == [1, 2, 3]
        diags = store.diagnostics(target="t0", drafter=row["drafter"])
        assert {(d["name"], d["depth"]) for d in diags if d["depth"] > 0} == {
            (n, k) for n in ("rms", "sink_attn", "recent_attn", "draft_attn", "attn_entropy") for k in (1, 2, 3)
        }
        # the choice: a decoder's tokens per pass at that depth, at the spec's cost ratio, kept with it
        tokens = {c["depth"]: c["decode_accept_len"] for c in curve} | {0: 1.0}
        acc = {c["depth"]: c["accept_len"] for c in curve} | {0: 1.0}
        assert row["depth"] >= 1 and row["cost_ratio"] == 0.01 and row["cost_model"] == "leviathan"
        assert row["accept_len"] == pytest.approx(acc[row["depth"]])
        assert row["decode_accept_len"] == pytest.approx(tokens[row["depth"]])
        assert row["speedup"] == pytest.approx(tokens[row["depth"]] / (row["depth"] * 0.01 + 1))
        assert len(store.finished_result(row["cost_job_hash"])["cost"]["pass_ms"]) == 4  # timed all the same
        # the engine benchmark: every depth, plain decoding as the baseline, the prediction beside it
        bench = store.speedup_checks(target="t0", drafter=row["drafter"])
        assert [b["depth"] for b in bench] == [0, 1, 2, 3] and bench[0]["measured_speedup"] == 1.0
        assert bench[row["depth"]]["predicted_speedup"] == pytest.approx(row["speedup"])
        assert all(b["tokens_per_s"] > 0 and 1.0 <= b["engine_accept_len"] <= b["depth"] + 1 for b in bench)
        # trees: acceptance by rank and depth beside the curve, the tree chosen from it with the chain beside it
        ranks = store.rank_accepts(target="t0", drafter=row["drafter"])
        assert ranks and {r["depth"] for r in ranks} <= {1, 2, 3} and {r["rank"] for r in ranks} <= set(range(4))
        assert sum(r["accept"] for r in ranks if r["depth"] == 1) <= 1.0 + 1e-9
        assert isinstance(row["tree"], list) and row["tree_speedup"] > 0 and row["tree_chain_speedup"] > 0
        checks = store.tree_checks(target="t0", drafter=row["drafter"])
        assert (checks[0]["tree"] == row["tree"]) if row["tree"] else checks == []
    store.close()


def test_mlflow_holds_a_run_per_job_with_curves_checkpoints_and_plots(first_run):
    tmp_path, _, _ = first_run
    store = _store(tmp_path)
    jobs = store.jobs()
    store.close()
    client, exp = _mlflow(tmp_path)
    runs = client.search_runs([exp.experiment_id])
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(runs) == 12 and len(children) == 11
    assert {r.data.tags["specfleet.job_hash"] for r in children} == {j["job_hash"] for j in jobs}
    for r in children:
        kind = r.data.tags["specfleet.kind"]
        assert r.info.status == "FINISHED"
        paths = {a.path for a in client.list_artifacts(r.info.run_id)}
        # what the job said on its worker, kept with its run
        log = Path(client.download_artifacts(r.info.run_id, "worker.log", str(tmp_path / "logs" / r.info.run_id)))
        text = log.read_text()
        job_hash = r.data.tags["specfleet.job_hash"]
        assert text.startswith(f"{kind} {job_hash[:12]} on ") and f"{kind} {job_hash[:12]} on " in text.splitlines()[-1]
        # no figure per job (MLflow charts the series; `specfleet report` draws the experiment's)
        assert not {p for p in paths if p.endswith(".png")}
        if kind == "measure_curve":
            steps = sorted(m.step for m in client.get_metric_history(r.info.run_id, "accept_len"))
            assert steps == [0, 1, 2, 3]
            rms = sorted(m.step for m in client.get_metric_history(r.info.run_id, "rms/default/T0"))
            assert rms == [1, 2, 3]
            walk = sorted(m.step for m in client.get_metric_history(r.info.run_id, "decode_accept_len"))
            assert walk == [0, 1, 2, 3]
        if kind == "train_drafter":
            # the checkpoint stays in the work directory (the embedded default's store): the run says where
            tags = r.data.tags
            assert tags["specfleet.files_uri"].startswith(str((tmp_path / ".specfleet" / "checkpoints").resolve()))
            assert dir_hash(tags["specfleet.files_uri"]) == tags["specfleet.files_sha256"]
            assert not client.list_artifacts(r.info.run_id, "checkpoint")
        if kind == "select_depth":
            assert len(client.get_metric_history(r.info.run_id, "speedup")) == 4 and "tree.json" in paths
        if kind == "measure_speedup":
            steps = sorted(m.step for m in client.get_metric_history(r.info.run_id, "measured_speedup"))
            assert steps == [0, 1, 2, 3]


def test_best_and_speedups_answer_from_the_database(first_run):
    tmp_path, _, _ = first_run
    out = specfleet("best", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert {"target", "drafter", "depth", "accept_len", "speedup", "cost_ratio", "decode_accept_len"} <= set(rows[0])
    assert len(specfleet("best", "--json", "--drafter", "post", cwd=tmp_path).stdout.split('"drafter"')) == 2
    bench = specfleet("speedups", "--json", cwd=tmp_path)
    assert bench.returncode == 0 and len(json.loads(bench.stdout)) == 8
    assert "best measured" in specfleet("speedups", cwd=tmp_path).stdout


def test_autotune_exports_the_trained_drafter_for_vllm(first_run):
    tmp_path, _, _ = first_run
    tuned = specfleet("autotune", "--engine", "vllm", "--target", "t0", "--drafter", "pre", cwd=tmp_path)
    exported = list((tmp_path / ".specfleet" / "exports").glob("*/config.json"))
    assert len(exported) == 1 and (exported[0].parent / "model.safetensors").is_file()
    assert tuned.returncode == 0, tuned.stderr
    config = json.loads(shlex.split(tuned.stdout)[1])
    assert config["method"] == "eagle3" and config["num_speculative_tokens"] > 0
    assert Path(config["model"]) == exported[0].parent.resolve()
    refused = specfleet("autotune", "--engine", "vllm", "--drafter", "post", cwd=tmp_path)  # post-norm + fc_norm
    assert refused.returncode == 1 and "norm: post" in refused.stderr


def test_an_unchanged_rerun_reuses_every_job(first_run, ray_cluster):
    tmp_path, spec, _ = first_run
    planned = specfleet("run", str(spec), "--dry-run", "--address", ray_cluster, cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert "plan: 11 jobs" in planned.stdout and planned.stdout.count(" reuse ") == 11  # nothing would run
    again = specfleet("run", str(spec), "--address", ray_cluster, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "0 ran, 11 reused, 0 failed" in again.stdout
    client, exp = _mlflow(tmp_path)
    assert len(client.search_runs([exp.experiment_id])) == 12  # no MLflow run duplicated


def test_a_changed_evaluation_reruns_only_what_it_affects(first_run, ray_cluster):
    tmp_path, spec, _ = first_run
    deeper = dict(SPEC, evaluation={**SPEC["evaluation"], "max_depth": 2})
    spec.write_text(yaml.safe_dump(deeper))
    partial = specfleet("run", str(spec), "--address", ray_cluster, cwd=tmp_path)
    assert partial.returncode == 0, partial.stderr[-3000:]
    assert "8 ran, 3 reused, 0 failed" in partial.stdout
    store = _store(tmp_path)
    trained = [j for j in store.jobs() if j["kind"].startswith("train")]
    assert len(trained) == 3 and all(j["attempts"] == 1 for j in trained)  # reused, not recorded again
    assert len(store.experiments()) == 2
    store.close()
    client, exp = _mlflow(tmp_path)
    assert len(client.search_runs([exp.experiment_id])) == 12 + 1 + 8


@pytest.mark.browser
def test_report_pages_render_in_chromium_and_land_in_mlflow(first_run):
    """After the changed rerun: the report of the newest e2e run, and the two runs compared."""
    from support import browser

    tmp_path, _, _ = first_run
    browser.need_chromium()
    store = _store(tmp_path)
    first, second = store.experiments()
    store.close()
    client, exp = _mlflow(tmp_path)
    before = len(client.search_runs([exp.experiment_id]))
    wrong = specfleet("report", "e2e@99", cwd=tmp_path)
    assert wrong.returncode == 1 and wrong.stderr.count("\n") == 1
    assert "EXPERIMENT" in wrong.stderr and f"e2e@{first['id']}" in wrong.stderr
    assert not (tmp_path / ".specfleet" / "reports" / "e2e_99").exists()
    pages = {}
    for args in (("e2e",), (f"e2e@{first['id']}", f"e2e@{second['id']}")):
        made = specfleet("report", *args, cwd=tmp_path)
        assert made.returncode == 0, made.stderr[-3000:]
        page = Path(made.stdout.split("report: ")[1].split(" (")[0])
        pages[args] = page = page if page.is_absolute() else tmp_path / page
        rendered = browser.render(page)
        pngs = sorted(page.parent.glob("*.png"))
        assert rendered.errors == [] and rendered.title.startswith("specfleet report: e2e")
        assert len(rendered.images) == len(pngs) >= 2
        assert all(
            i["complete"] and i["naturalWidth"] > 100 and i["src"].startswith("data:image/png;base64,")
            for i in rendered.images
        )
    single = pages[("e2e",)].read_text()
    for section in (
        "Tuned configs",
        "Acceptance and survival by depth",
        "Predicted and measured speedup by depth",
        "Drift diagnostics by depth",
        "rms by depth",
        "Predicted against measured speedup",
        "Time per job kind",
    ):
        assert section in single
    assert len(list(pages[("e2e",)].parent.glob("*_speedup.png"))) == 2  # one per pairing
    # logged to each experiment's own run: the newest run's page, and the comparison under the first run
    assert len(client.search_runs([exp.experiment_id])) == before
    for run_id, folder in (
        (second["mlflow_run_id"], "report"),
        (first["mlflow_run_id"], f"report-vs-e2e_{second['id']}"),
    ):
        logged = {a.path for a in client.list_artifacts(run_id, folder)}
        assert f"{folder}/report.html" in logged and f"{folder}/tables.md" in logged


def test_a_gpu_request_the_cluster_cannot_meet_is_refused_before_anything_is_written(first_run, ray_cluster):
    tmp_path, _, _ = first_run
    store = _store(tmp_path)
    before = [e["name"] for e in store.experiments()]
    store.close()
    gpu = dict(SPEC, name="needs-gpu", resources={"train_drafter": {"num_cpus": 1, "num_gpus": 1}})
    gspec = tmp_path / "gpu.yaml"
    gspec.write_text(yaml.safe_dump(gpu))
    refused = specfleet("run", str(gspec), "--address", ray_cluster, cwd=tmp_path)
    assert refused.returncode == 3
    assert "resources.train_drafter.num_gpus" in refused.stderr and "0 GPU" in refused.stderr
    assert "Traceback" not in refused.stderr
    store = _store(tmp_path)
    assert [e["name"] for e in store.experiments()] == before
    store.close()
    client, _ = _mlflow(tmp_path)
    assert client.get_experiment_by_name("specfleet/needs-gpu") is None


def _kill_when_running(title: str, driver: subprocess.Popen, within_s: float = 300) -> int | None:
    """SIGKILL the Ray worker whose process title is `title` (Ray names a worker after the task it
    runs) as soon as it shows; its pid, or None if the driver ended first."""
    import time

    import psutil

    deadline = time.monotonic() + within_s
    while driver.poll() is None and time.monotonic() < deadline:
        for proc in psutil.process_iter(["cmdline"]):
            if " ".join(proc.info["cmdline"] or []).strip() == title:
                proc.kill()
                return proc.pid
        time.sleep(0.05)
    return None


def test_a_worker_killed_mid_job_is_retried_by_ray_and_its_job_recorded_once(first_run, ray_cluster):
    tmp_path, spec, _ = first_run
    store = _store(tmp_path)
    (job,) = [j for j in store.jobs() if j["name"] == "train_drafter t0/pre"]
    shutil.rmtree(store.finished_result(job["job_hash"])["files_uri"])  # lost: the job runs again
    store.close()
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    secret = json.dumps({"env_vars": {"HF_TOKEN": "hf_e2eSecret42"}})  # what a gated model would need
    driver = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "run", str(spec), "--address", ray_cluster, "--runtime-env", secret],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    early = []  # off a terminal, progress comes as plain lines while the run goes on
    for line in driver.stderr:
        early.append(line)
        if line.rstrip().endswith("] started train_drafter t0/pre"):
            break
    assert driver.poll() is None, "".join(early)[-3000:]
    killed = _kill_when_running("ray::train_drafter t0/pre", driver)
    out, err = driver.communicate(timeout=600)
    err = "".join(early) + err
    assert killed is not None, "the job's worker never showed"
    assert driver.returncode == 0, err[-3000:]
    assert "1 ran, 10 reused, 0 failed" in out  # Ray ran it again; the driver saw one job finish
    assert "hf_e2eSecret42" not in out + err
    store = _store(tmp_path)
    (again,) = [j for j in store.jobs() if j["name"] == "train_drafter t0/pre"]
    result = store.finished_result(again["job_hash"])
    assert (again["status"], again["attempts"]) == ("done", 2)  # the first run's, and this run's: recorded once
    assert dir_hash(result["files_uri"]) == result["files_sha256"]
    store.close()
    client, exp = _mlflow(tmp_path)
    runs = client.search_runs([exp.experiment_id], f"tags.`specfleet.job_hash` = '{job['job_hash']}'")
    assert sorted(r.info.status for r in runs) == ["FINISHED", "FINISHED"]  # one per run that ran it
    everything = [(r.data.params, r.data.tags) for r in client.search_runs([exp.experiment_id])]
    assert "hf_e2eSecret42" not in json.dumps(everything)


def test_the_runtime_env_reaches_every_worker(ray_cluster):
    import ray

    from pipeline.run.ray_cluster import autoscaler_node_types, connect

    connect(ray_cluster, {"env_vars": {"HF_TOKEN": "hf_fromTheDriver"}})
    try:

        @ray.remote(num_cpus=1)
        def read():
            return os.environ.get("HF_TOKEN"), ray.get_runtime_context().get_node_id()

        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        assert len(nodes) == 2
        # pinned to each node in turn (SPREAD is a preference: a busy node can leave one unused)
        pinned = [NodeAffinitySchedulingStrategy(node, soft=False) for node in nodes for _ in range(2)]
        seen = ray.get([read.options(scheduling_strategy=s).remote() for s in pinned])
        assert {token for token, _ in seen} == {"hf_fromTheDriver"}
        assert {node for _, node in seen} == set(nodes)  # on both nodes
        assert autoscaler_node_types() is None  # `ray start` nodes: no autoscaler, only the nodes there count
    finally:
        ray.shutdown()
