"""Autotune: engine configs from tuned rows, with a drafter path the engine can load."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from pipeline.autotune import drafter_path, render, schedule_of
from pipeline.errors import UserError

SCHEDULE = [(1, 8, 4), (9, 32, 2), (33, 256, 0)]


def test_render_every_engine_from_a_schedule():
    vllm = json.loads(shlex.split(render("vllm", SCHEDULE, model="/d", method="eagle3"))[1])
    assert vllm["num_speculative_tokens"] == 4 and vllm["num_speculative_tokens_per_batch_size"][0] == [1, 8, 4]
    sglang = render("sglang", SCHEDULE, model="/d", method="eagle3")
    assert "--speculative-num-steps 4" in sglang and '"33"' in sglang
    trt = yaml.safe_load(render("trtllm", SCHEDULE, model="/d", method="eagle3"))["speculative_config"]
    assert trt["draft_len_schedule"] == {8: 4, 32: 2} and trt["max_draft_len"] == 4


def test_static_depth_and_no_speculation():
    row = {"depth": 3, "schedule": None}
    vllm = json.loads(shlex.split(render("vllm", schedule_of(row), model="/d", method="eagle3"))[1])
    assert vllm == {"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}
    with pytest.raises(UserError, match="does not pay"):
        render("vllm", [(1, 64, 0)], model="/d", method="eagle3")


class FakeStore:
    def __init__(self, results):
        self.results = results

    def finished_result(self, job_hash):
        return self.results.get(job_hash)


def checkpoint_dir(tmp_path, files):
    """A drafter checkpoint folder as the work directory keeps it."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for name, blob in files.items():
        (ckpt / name).write_bytes(blob)
    return str(ckpt)


def test_trained_drafter_is_exported_once_for_the_engine(tmp_path, tiny_drafters):
    store = FakeStore({"d" * 64: {"checkpoint_dir": checkpoint_dir(tmp_path, tiny_drafters["pre"][1]), "metrics": {},
                                  "family": "eagle3"}})
    row = {"target": "t", "drafter": "pre", "drafter_job_hash": "d" * 64}
    path, method = drafter_path(store, row, tmp_path / "work", None)
    assert method == "eagle3" and (tmp_path / "work" / "exports" / ("d" * 64) / "config.json").is_file()
    assert json.loads((tmp_path / "work" / "exports" / ("d" * 64) / "config.json").read_text())["architectures"] == [
        "LlamaForCausalLMEagle3"]
    assert drafter_path(store, row, tmp_path / "work", "/given") == ("/given", "eagle3")
    assert drafter_path(store, row, tmp_path / "work", "/small", "draft_model") == ("/small", "draft_model")
    with pytest.raises(UserError, match="--drafter-path"):
        drafter_path(FakeStore({}), {**row, "drafter_job_hash": None}, tmp_path / "work", None)


def test_a_draft_model_is_served_from_its_folder_as_its_family_says(tmp_path, tiny_target):
    """The family recorded with the trained drafter decides, not what files the folder holds."""
    folder = checkpoint_dir(tmp_path, tiny_target[2])
    store = FakeStore({"s" * 64: {"checkpoint_dir": folder, "metrics": {}, "family": "standalone"}})
    row = {"target": "t", "drafter": "small", "drafter_job_hash": "s" * 64}
    assert drafter_path(store, row, tmp_path / "work", None) == (str(Path(folder).resolve()), "draft_model")
    assert not (tmp_path / "work").exists()  # nothing to export
    old = FakeStore({"s" * 64: {"checkpoint_dir": folder, "metrics": {}}})  # stored before families were kept
    with pytest.raises(UserError, match="rerun its experiment"):
        drafter_path(old, row, tmp_path / "work", None)


def test_post_norm_drafter_is_not_exported_silently(tmp_path, tiny_drafters):
    store = FakeStore({"e" * 64: {"checkpoint_dir": checkpoint_dir(tmp_path, tiny_drafters["post"][1]), "metrics": {},
                                  "family": "eagle3"}})
    with pytest.raises(UserError, match="norm: post"):
        drafter_path(store, {"target": "t", "drafter": "post", "drafter_job_hash": "e" * 64}, tmp_path, None)


def test_production_metrics_become_the_active_version(tmp_path):
    from db.store import Store
    from pipeline.autotune import from_metrics
    from test_prod_metrics import MODEL, exposition

    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    before, after = tmp_path / "a.txt", tmp_path / "b.txt"
    before.write_text(exposition(100, 400, 150, [70, 45, 25, 10]))
    after.write_text(exposition(300, 1200, 430, [230, 120, 60, 20]))
    row, report = from_metrics(store, [str(before), str(after)], model_name=None, drafter="eagle3-prod",
                               cost_ratio=0.1, hardware=None, temperature=0.0, code_version="v")
    # window survival 0.8, 0.375, 0.175, 0.05 at c = 0.1: speedups 1, 1.636, 1.813, 1.808, 1.714 -> k = 2
    assert row["target"] == MODEL and row["depth"] == 2 and row["version"] == 1
    (stored,) = store.best(target=MODEL, drafter="eagle3-prod")
    assert (stored["source"], stored["active"], stored["depth"]) == ("production", True, 2)
    assert "no offline curve" in report
    with pytest.raises(UserError, match="--cost-ratio"):
        from_metrics(store, [str(after)], model_name=None, drafter="unknown", cost_ratio=None, hardware=None,
                     temperature=0.0, code_version="v")
    store.close()


def test_production_retune_uses_the_offline_timed_engine_iterations(tmp_path):
    """Without --cost-ratio the production choice uses the cost model the offline choice used."""
    from db.store import Store
    from pipeline.autotune import from_metrics
    from pipeline.core.contracts import Profiled
    from pipeline.core.types import CostProfile
    from test_prod_metrics import MODEL, exposition

    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    exp = store.ensure_experiment(name="e", spec_hash="s", spec_yaml="name: e\n", code_version="v")
    timed = Profiled(cost=CostProfile("cpu 2t x1 float32", 1.0, 4.0, 6.8, pass_ms=(4.0, 6.0, 6.4, 6.8)))
    for job_hash, kind, result, tuned in (
        ("cost-1", "profile_cost", timed.model_dump(mode="json"), None),
        ("select-1", "select_depth", {}, dict(
            experiment_id=exp, target=MODEL, drafter="eagle3-prod", hardware="cpu 2t x1 float32",
            condition="zdefault", temperature=0.0, depth=1, accept_len=1.6, speedup=1.07, cost_ratio=0.25,
            spec_hash="s", code_version="v", mlflow_run_id="r", cost_job_hash="cost-1", cost_model="timed",
            pass_cost=timed.cost.pass_cost)),
    ):
        store.link_job(exp, job_hash=job_hash, kind=kind, name=job_hash, config={})
        store.mark_running(job_hash, mlflow_run_id=None)
        store.mark_done(job_hash, result=result, tuned=tuned)
    scrape = tmp_path / "m.txt"
    scrape.write_text(exposition(100, 400, 150, [70, 45, 25, 10]))  # survival 0.7 0.45 0.25 0.10
    row, _ = from_metrics(store, [str(scrape)], model_name=None, drafter="eagle3-prod", cost_ratio=None,
                          hardware=None, temperature=0.0, code_version="v")
    # timed: 1.7 / 1.5 = 1.133, 2.15 / 1.6 = 1.344, 2.4 / 1.7 = 1.412 -> 3 (depth 4 was never timed)
    # Leviathan at the stored c = 0.25 would say 2.5 / 2.0 = 1.25 at k = 4 and pick 2 (2.15 / 1.5 = 1.433)
    assert row["depth"] == 3
    (stored,) = [r for r in store.best(target=MODEL, drafter="eagle3-prod") if r["source"] == "production"]
    assert stored["depth"] == 3 and "timed engine iterations" in stored["notes"]
    assert stored["hardware"] == "cpu 2t x1 float32"  # the hardware the timings belong to
    assert (stored["cost_model"], stored["pass_cost"]) == ("timed", [1.0, 1.5, 1.6, 1.7])
    # a second re-tune still costs passes as the offline choice did, not as the production version
    # (which sorts first: condition "production" < "zdefault")
    row, _ = from_metrics(store, [str(scrape)], model_name=None, drafter="eagle3-prod", cost_ratio=None,
                          hardware=None, temperature=0.0, code_version="v")
    assert row["depth"] == 3 and row["version"] == 2
    store.close()


def test_offline_depth_zero_prints_no_config_and_exports_nothing(tmp_path):
    from db.store import Store
    from test_real_vllm_metrics import _cli

    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    exp = store.ensure_experiment(name="e", spec_hash="s", spec_yaml="name: e\n", code_version="v")
    store.link_job(exp, job_hash="select-0", kind="select_depth", name="select-0", config={})
    store.mark_running("select-0", mlflow_run_id=None)
    store.mark_done("select-0", result={}, tuned=dict(
        experiment_id=exp, target="t", drafter="d", hardware="cpu 2t x1 float32", condition="default",
        temperature=0.0, depth=0, accept_len=1.0, speedup=1.0, cost_ratio=0.3, spec_hash="s", code_version="v",
        mlflow_run_id="r", drafter_job_hash="never-trained"))
    store.close()
    done = _cli("autotune", "--engine", "trtllm", "--target", "t", "--drafter", "d", workdir=tmp_path)
    assert done.returncode == 0 and done.stdout == ""
    assert "speculation does not pay on cpu 2t x1 float32" in done.stderr
    assert not (tmp_path / "exports").exists()


def test_transformers_settings_make_hf_assisted_generation_draft_the_tuned_depth(tiny_target):
    """The emitted settings, applied as a user would, make HF draft exactly k tokens a round."""
    import copy

    import torch

    model, _, _ = tiny_target
    config = json.loads(render("transformers", [(1, 4, 3), (5, 256, 1)], model="/draft", method="draft_model"))
    assert config["assistant_model"] == "/draft"
    assistant = copy.deepcopy(model)
    for key, value in config["assistant_generation_config"].items():
        setattr(assistant.generation_config, key, value)
    drafted = []
    forward = assistant.forward

    def counting(*args, **kwargs):
        drafted.append(kwargs["input_ids"].shape[1])
        return forward(*args, **kwargs)

    assistant.forward = counting
    prompt = torch.tensor([[1, 40, 41, 42, 43]])
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), assistant_model=assistant,
                         max_new_tokens=13, do_sample=False, eos_token_id=None, pad_token_id=0)
    plain = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=13, do_sample=False,
                           eos_token_id=None, pad_token_id=0)
    assert torch.equal(out, plain)
    # each round feeds the assistant what it has not seen, then 2 more single steps: 3 drafts a round
    starts = [i for i, n in enumerate(drafted) if n > 1]
    assert len(starts) >= 3 and starts[0] == 0
    assert all(b - a == 3 for a, b in zip(starts, starts[1:]))
    with pytest.raises(UserError, match="standalone draft model"):
        render("transformers", [(1, 4, 3)], model="/d", method="eagle3")
    with pytest.raises(UserError, match="batch-size-1 depth is 0"):
        render("transformers", [(1, 1, 0), (2, 8, 2)], model="/d", method="draft_model")
