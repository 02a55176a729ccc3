"""Autotune: engine configs from tuned rows, with a drafter path the engine can load."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from db.rows import ChoiceRows
from pipeline.autotune.choice_row import schedule_of, tree_of
from pipeline.autotune.tuning import drafter_path, pick_version, render
from pipeline.errors import UserError

SCHEDULE = [(1, 8, 4), (9, 32, 2), (33, 256, 0)]


def test_render_every_engine_from_a_schedule(tmp_path):
    vllm = json.loads(shlex.split(render("vllm", SCHEDULE, model="/d", method="eagle3").text)[1])
    assert vllm["num_speculative_tokens"] == 4 and vllm["num_speculative_tokens_per_batch_size"][0] == [1, 8, 4]
    sglang = render("sglang", SCHEDULE, model="/d", method="eagle3", config_dir=tmp_path)
    assert (
        "--speculative-num-steps 4" in sglang.text and "--speculative-adaptive-config " + str(tmp_path) in sglang.text
    )
    (name,) = sglang.files
    assert json.loads((tmp_path / name).read_text()) == {
        "1": {"candidate_steps": [4]},
        "9": {"candidate_steps": [2]},
        "33": {"candidate_steps": [0]},
    }
    stable = render("trtllm", SCHEDULE, model="/d", method="eagle3")  # 1.2.1: EAGLE-3 reads no schedule
    assert yaml.safe_load(stable.text)["speculative_config"]["max_draft_len"] == 4
    assert "draft_len_schedule" not in stable.text and "batch-size-1 depth 4" in stable.notes[0]
    trt = yaml.safe_load(render("trtllm", SCHEDULE, model="/d", method="draft_model").text)["speculative_config"]
    assert trt["draft_len_schedule"] == {1: 4, 9: 2, 33: 0} and trt["decoding_type"] == "Draft_Target"  # lower bounds
    trt = yaml.safe_load(render("trtllm", SCHEDULE, model="/d", method="eagle3", version="1.4.0rc1").text)
    # upper bounds; 1.3.0rc8-1.4.0rc1 collapse acceptance after a tier that drafts nothing: 0 is written as 1
    assert trt["speculative_config"]["draft_len_schedule"] == {8: 4, 32: 2, 256: 1}


def test_static_depth_and_no_speculation():
    row = {"depth": 3, "schedule": None}
    vllm = json.loads(shlex.split(render("vllm", schedule_of(row), model="/d", method="eagle3").text)[1])
    assert vllm == {"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}
    with pytest.raises(UserError, match="does not pay"):
        render("vllm", [(1, 64, 0)], model="/d", method="eagle3")


class FakeStore:
    def __init__(self, results):
        self.results = results

    def finished_result(self, job_hash):
        return self.results.get(job_hash)

    def job_config(self, job_hash):
        return {"target": {"name": "t", "hf": "org/target"}} if job_hash in self.results else None


def checkpoint_dir(tmp_path, files):
    """A drafter checkpoint folder as the work directory keeps it."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for name, blob in files.items():
        (ckpt / name).write_bytes(blob)
    return str(ckpt)


@pytest.mark.slow
def test_trained_drafter_is_exported_once_for_the_engine(tmp_path, tiny_drafters):
    store = FakeStore(
        {"d" * 64: {"files_uri": checkpoint_dir(tmp_path, tiny_drafters["pre"][1]), "metrics": {}, "family": "eagle3"}}
    )
    row = {"target": "t", "drafter": "pre", "drafter_job_hash": "d" * 64}
    path, method = drafter_path(store, row, tmp_path / "work", None)
    assert method == "eagle3" and (tmp_path / "work" / "exports" / ("d" * 64) / "config.json").is_file()
    assert json.loads((tmp_path / "work" / "exports" / ("d" * 64) / "config.json").read_text())["architectures"] == [
        "LlamaForCausalLMEagle3"
    ]
    spec_path, method = drafter_path(store, row, tmp_path / "work", None, export_format="speculators")
    config = json.loads((Path(spec_path) / "config.json").read_text())
    assert method == "eagle3" and config["speculators_model_type"] == "eagle3"
    assert config["speculators_config"]["verifier"]["name_or_path"] == "org/target"  # the train job's target
    given = str(tmp_path / "ckpt")
    assert drafter_path(store, row, tmp_path / "work", given) == (given, "eagle3")  # the recorded family's
    assert drafter_path(store, row, tmp_path / "work", given, "draft_model") == (given, "draft_model")
    assert drafter_path(store, row, tmp_path / "work", "org/hub-drafter") == ("org/hub-drafter", "eagle3")
    with pytest.raises(UserError, match=r"^--drafter-path: /no/such/drafter does not exist on this machine$"):
        drafter_path(store, row, tmp_path / "work", "/no/such/drafter")
    with pytest.raises(UserError, match="--method: pre is of the eagle3 family, served as eagle3, not draft_model"):
        drafter_path(store, row, tmp_path / "work", None, "draft_model")
    with pytest.raises(UserError, match="--method: 'medusa' is not"):
        drafter_path(store, row, tmp_path / "work", None, "medusa")
    with pytest.raises(UserError, match="--drafter-path"):
        drafter_path(FakeStore({}), {**row, "drafter_job_hash": None}, tmp_path / "work", None)


def test_a_draft_model_is_served_from_its_folder_as_its_family_says(tmp_path, tiny_target):
    """The family recorded with the trained drafter decides, not what files the folder holds."""
    folder = checkpoint_dir(tmp_path, tiny_target[2])
    store = FakeStore({"s" * 64: {"files_uri": folder, "metrics": {}, "family": "standalone"}})
    row = {"target": "t", "drafter": "small", "drafter_job_hash": "s" * 64}
    assert drafter_path(store, row, tmp_path / "work", None) == (str(Path(folder).resolve()), "draft_model")
    assert not (tmp_path / "work").exists()  # nothing to export
    old = FakeStore({"s" * 64: {"files_uri": folder, "metrics": {}}})  # stored before families were kept
    with pytest.raises(UserError, match="or one trained by an older release"):
        drafter_path(old, row, tmp_path / "work", None)


def test_a_checkpoint_on_another_machine_is_an_error_naming_it(tmp_path):
    """A database shared between machines: the trained drafter is recorded, its folder is not here."""
    store = FakeStore({"d" * 64: {"files_uri": "/elsewhere/ckpt/d", "metrics": {}, "family": "eagle3"}})
    row = {"target": "t", "drafter": "pre", "drafter_job_hash": "d" * 64}
    with pytest.raises(UserError, match=r"t/pre cannot be read here \(checkpoint /elsewhere/ckpt/d: no such folder"):
        drafter_path(store, row, tmp_path / "work", None)
    assert not (tmp_path / "work").exists()


def test_a_named_drafter_without_a_record_is_served_as_its_config_says(tmp_path):
    row = {"target": "t", "drafter": "theirs"}
    for name, config, method in (
        ("eagle", {"architectures": ["LlamaForCausalLMEagle3"]}, "eagle3"),
        ("speculators", {"speculators_model_type": "eagle3"}, "eagle3"),
        ("small", {"architectures": ["LlamaForCausalLM"]}, "draft_model"),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
        assert drafter_path(FakeStore({}), row, tmp_path, str(tmp_path / name)) == (str(tmp_path / name), method)
    with pytest.raises(UserError, match="--method: cannot tell what org/theirs is"):
        drafter_path(FakeStore({}), row, tmp_path, "org/theirs")
    assert drafter_path(FakeStore({}), row, tmp_path, "org/theirs", "eagle3") == ("org/theirs", "eagle3")


def _version(version, condition, source, hardware="h100", created="2026-12-01T10:00:00", target="t", drafter="d"):
    return {
        "target": target,
        "drafter": drafter,
        "hardware": hardware,
        "condition": condition,
        "source": source,
        "version": version,
        "created_at": created,
        "drafter_job_hash": f"train-{drafter}" if source == "offline" else None,
    }


def test_several_active_versions_pick_the_newest_unless_told():
    offline = _version(1, "template+bos", "offline")
    production = _version(2, "production", "production", created="2026-12-01T11:00:00")
    row, note = pick_version([offline, production], hardware=None, condition=None)
    assert (row["version"], row["condition"]) == (2, "production")
    assert row["drafter_job_hash"] == "train-d"  # a production version serves the drafter trained offline
    assert "newest of 2 active versions: condition production" in note
    assert "not condition template+bos (v1, offline)" in note
    assert pick_version([offline, production], hardware=None, condition="template+bos") == (offline, None)
    with pytest.raises(UserError, match=r"--hardware: tuned on 2 kinds of hardware \(a100; h100\)"):
        pick_version([offline, _version(1, "template+bos", "offline", hardware="a100")], hardware=None, condition=None)
    assert pick_version(
        [offline, _version(1, "template+bos", "offline", hardware="a100")], hardware="h100", condition=None
    ) == (offline, None)
    with pytest.raises(UserError, match=r"--target/--drafter: 2 pairings match \(t/d, t/e\)"):
        pick_version([offline, _version(1, "template+bos", "offline", drafter="e")], hardware=None, condition=None)
    with pytest.raises(UserError, match=r"no tuned config matches \(have: t/d on h100, condition template\+bos"):
        pick_version([offline], hardware=None, condition="no_template")
    with pytest.raises(UserError, match="run `specfleet run SPEC` first"):
        pick_version([], hardware=None, condition=None)


def test_post_norm_drafter_is_not_exported_silently(tmp_path, tiny_drafters):
    store = FakeStore(
        {"e" * 64: {"files_uri": checkpoint_dir(tmp_path, tiny_drafters["post"][1]), "metrics": {}, "family": "eagle3"}}
    )
    with pytest.raises(UserError, match="norm: post"):
        drafter_path(store, {"target": "t", "drafter": "post", "drafter_job_hash": "e" * 64}, tmp_path, None)


def test_production_metrics_become_the_active_version(tmp_path):
    from test_prod_metrics import MODEL, exposition

    from db.store import Store
    from pipeline.autotune.retune import from_metrics, read_counters

    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    before, after = tmp_path / "a.txt", tmp_path / "b.txt"
    before.write_text(exposition(100, 400, 150, [70, 45, 25, 10]))
    after.write_text(exposition(300, 1200, 430, [230, 120, 60, 20]))
    row, report = from_metrics(
        store,
        read_counters([str(before), str(after)], None),
        model_name=None,
        drafter="eagle3-prod",
        cost_ratio=0.1,
        hardware=None,
        temperature=0.0,
        code_version="v",
    )
    # window survival 0.8, 0.375, 0.175, 0.05 at c = 0.1: speedups 1, 1.636, 1.813, 1.808, 1.714 -> k = 2
    assert row["target"] == MODEL and row["depth"] == 2 and row["version"] == 1
    (stored,) = store.best(target=MODEL, drafter="eagle3-prod")
    assert (stored["source"], stored["active"], stored["depth"]) == ("production", True, 2)
    assert "no offline curve" in report
    with pytest.raises(UserError, match="--cost-ratio"):
        from_metrics(
            store,
            read_counters([str(after)], None),
            model_name=None,
            drafter="unknown",
            cost_ratio=None,
            hardware=None,
            temperature=0.0,
            code_version="v",
        )
    store.close()


def test_production_retune_uses_the_offline_timed_engine_iterations(tmp_path):
    """Without --cost-ratio the production choice uses the cost model the offline choice used."""
    from test_prod_metrics import MODEL, exposition

    from db.store import Store
    from pipeline.autotune.retune import from_metrics, read_counters
    from pipeline.core.contracts import Profiled
    from pipeline.core.types import CostProfile

    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    exp = store.ensure_experiment(name="e", spec_hash="s", spec_yaml="name: e\n", code_version="v")
    timed = Profiled(cost=CostProfile("cpu 2t x1 float32", 1.0, 4.0, 6.8, pass_ms=(4.0, 6.0, 6.4, 6.8)))
    for job_hash, kind, result, tuned in (
        ("cost-1", "profile_cost", timed.model_dump(mode="json"), None),
        (
            "select-1",
            "select_depth",
            {},
            dict(
                experiment_id=exp,
                target=MODEL,
                drafter="eagle3-prod",
                hardware="cpu 2t x1 float32",
                condition="zdefault",
                temperature=0.0,
                depth=1,
                accept_len=1.6,
                speedup=1.07,
                cost_ratio=0.25,
                spec_hash="s",
                code_version="v",
                mlflow_run_id="r",
                cost_job_hash="cost-1",
                cost_model="timed",
                pass_cost=timed.cost.pass_cost,
                block_drafting="depth",  # as a DFlash pairing run on blocks of depth + 1 records it
            ),
        ),
    ):
        store.link_job(exp, job_hash=job_hash, kind=kind, name=job_hash, config={})
        store.mark_running(job_hash, mlflow_run_id=None)
        store.mark_done(job_hash, result=result, rows=ChoiceRows(tuned=tuned))
    scrape = tmp_path / "m.txt"
    scrape.write_text(exposition(100, 400, 150, [70, 45, 25, 10]))  # survival 0.7 0.45 0.25 0.10
    row, _ = from_metrics(
        store,
        read_counters([str(scrape)], None),
        model_name=None,
        drafter="eagle3-prod",
        cost_ratio=None,
        hardware=None,
        temperature=0.0,
        code_version="v",
    )
    # timed: 1.7 / 1.5 = 1.133, 2.15 / 1.6 = 1.344, 2.4 / 1.7 = 1.412 -> 3 (depth 4 was never timed)
    # Leviathan at the stored c = 0.25 would say 2.5 / 2.0 = 1.25 at k = 4 and pick 2 (2.15 / 1.5 = 1.433)
    assert row["depth"] == 3
    (stored,) = [r for r in store.best(target=MODEL, drafter="eagle3-prod") if r["source"] == "production"]
    assert stored["depth"] == 3 and "timed engine iterations" in stored["notes"]
    assert stored["hardware"] == "cpu 2t x1 float32"  # the hardware the timings belong to
    assert (stored["cost_model"], stored["pass_cost"]) == ("timed", [1.0, 1.5, 1.6, 1.7])
    assert stored["block_drafting"] == "depth"  # how the drafter is run stays the pairing's
    # a second re-tune still costs passes as the offline choice did, not as the production version
    # (which sorts first: condition "production" < "zdefault"): the same inputs, so version 1 again
    row, _ = from_metrics(
        store,
        read_counters([str(scrape)], None),
        model_name=None,
        drafter="eagle3-prod",
        cost_ratio=None,
        hardware=None,
        temperature=0.0,
        code_version="v",
    )
    assert (row["depth"], row["version"], row["reused"]) == (3, 1, True)
    store.close()


def test_a_retune_is_stored_again_only_when_what_it_read_changed(tmp_path):
    """The same page again reuses the active version. The same page once the offline choice's
    batch-size costs are in the database, or after a newer offline choice, decides anew: stored."""
    from test_prod_metrics import MODEL, exposition

    from db.store import Store
    from pipeline.autotune.retune import from_metrics, read_counters
    from pipeline.core.contracts import Profiled
    from pipeline.core.types import CostProfile

    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    exp = store.ensure_experiment(name="e", spec_hash="s", spec_yaml="name: e\n", code_version="v")
    cost = CostProfile(
        "gpu",
        1.0,
        4.0,
        5.2,
        batch_sizes=(1, 8, 32),
        draft_ms_by_batch=(1.0, 1.2, 2.0),
        verify_ms_by_batch=((4.0, 4.4, 4.8, 5.2), (5.0, 6.5, 8.0, 9.5), (8.0, 14.0, 20.0, 26.0)),
        pass_ms=(4.0, 6.0, 6.4, 6.8),
    )
    store.link_job(exp, job_hash="cost-1", kind="profile_cost", name="cost-1", config={})  # not done yet
    for select in ("select-1", "select-2"):
        store.link_job(exp, job_hash=select, kind="select_depth", name=select, config={})
    tuned = dict(
        experiment_id=exp,
        target=MODEL,
        drafter="eagle3-prod",
        hardware="gpu",
        condition="template+bos",
        temperature=0.0,
        depth=3,
        accept_len=2.0,
        speedup=1.3,
        cost_ratio=0.25,
        spec_hash="s",
        code_version="v",
        mlflow_run_id="r",
        cost_job_hash="cost-1",
        cost_model="timed",
        pass_cost=cost.pass_cost,
        schedule=[[1, 8, 3], [9, 64, 1]],
    )
    store.mark_running("select-1", mlflow_run_id=None)
    store.mark_done("select-1", result={}, rows=ChoiceRows(tuned=tuned))
    scrape = tmp_path / "m.txt"
    scrape.write_text(exposition(100, 400, 150, [70, 45, 25, 10]))

    def retune() -> tuple:
        row, _ = from_metrics(
            store,
            read_counters([str(scrape)], None),
            model_name=None,
            drafter="eagle3-prod",
            cost_ratio=None,
            hardware=None,
            temperature=0.0,
            code_version="v",
        )
        return row["version"], row["reused"], row["schedule"]

    assert retune() == (1, False, None)  # the batch-size costs are not in the database: one depth
    assert retune() == (1, True, None)
    store.mark_running("cost-1", mlflow_run_id=None)
    store.mark_done("cost-1", result=Profiled(cost=cost).model_dump(mode="json"))
    assert retune() == (2, False, [[1, 1, 3], [2, 8, 1], [9, 64, 0]])  # the same page, read with the costs
    assert retune() == (2, True, [[1, 1, 3], [2, 8, 1], [9, 64, 0]])
    store.mark_running("select-2", mlflow_run_id=None)
    store.mark_done("select-2", result={}, rows=ChoiceRows(tuned={**tuned, "pass_cost": [1.0, 1.2, 1.3, 1.4]}))
    assert retune()[:2] == (3, False)  # a newer offline choice, timed otherwise
    assert [(r["version"], r["active"]) for r in store.best(history=True) if r["source"] == "production"] == [
        (3, True),
        (2, False),
        (1, False),
    ]
    store.close()


@pytest.mark.slow
def test_production_retune_rederives_the_batch_schedule_and_autotune_takes_the_newest(tmp_path):
    """A re-tune keeps a depth per batch size (from the offline batch-size costs), and afterwards
    `autotune --target --drafter` takes the newest active version unless --condition says otherwise."""
    from test_prod_metrics import MODEL, exposition
    from test_real_vllm_metrics import _cli

    from db.store import Store
    from pipeline.autotune.retune import from_metrics, read_counters
    from pipeline.core.contracts import Profiled
    from pipeline.core.types import CostProfile

    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    exp = store.ensure_experiment(name="e", spec_hash="s", spec_yaml="name: e\n", code_version="v")
    cost = CostProfile(
        "gpu",
        1.0,
        4.0,
        5.2,
        batch_sizes=(1, 8, 32),
        draft_ms_by_batch=(1.0, 1.2, 2.0),
        verify_ms_by_batch=((4.0, 4.4, 4.8, 5.2), (5.0, 6.5, 8.0, 9.5), (8.0, 14.0, 20.0, 26.0)),
        pass_ms=(4.0, 6.0, 6.4, 6.8),
    )
    for job_hash, kind, result, tuned in (
        ("cost-1", "profile_cost", Profiled(cost=cost).model_dump(mode="json"), None),
        (
            "select-1",
            "select_depth",
            {},
            dict(
                experiment_id=exp,
                target=MODEL,
                drafter="eagle3-prod",
                hardware="gpu",
                condition="template+bos",
                temperature=0.0,
                depth=3,
                accept_len=2.0,
                speedup=1.3,
                cost_ratio=0.25,
                spec_hash="s",
                code_version="v",
                mlflow_run_id="r",
                cost_job_hash="cost-1",
                cost_model="timed",
                pass_cost=cost.pass_cost,
                schedule=[[1, 8, 3], [9, 64, 1]],
            ),
        ),
    ):
        store.link_job(exp, job_hash=job_hash, kind=kind, name=job_hash, config={})
        store.mark_running(job_hash, mlflow_run_id=None)
        store.mark_done(job_hash, result=result, rows=ChoiceRows(tuned=tuned))
    scrape = tmp_path / "m.txt"
    scrape.write_text(exposition(100, 400, 150, [70, 45, 25, 10]))  # accept_len 1, 1.7, 2.15, 2.4
    row, report = from_metrics(
        store,
        read_counters([str(scrape)], None),
        model_name=None,
        drafter="eagle3-prod",
        cost_ratio=None,
        hardware=None,
        temperature=0.0,
        code_version="v",
    )
    # batch 8: 1.7 x 5 / (1.2 + 6.5) = 1.10 at k = 1 beats k = 2 (1.03); batch 32: k = 1 gives 0.85 -> 0
    assert row["depth"] == 3 and row["schedule"] == [[1, 1, 3], [2, 8, 1], [9, 64, 0]]
    assert "batch schedule re-derived" in report
    (stored,) = [r for r in store.best(target=MODEL, drafter="eagle3-prod") if r["source"] == "production"]
    assert stored["schedule"] == [[1, 1, 3], [2, 8, 1], [9, 64, 0]]
    with pytest.raises(UserError, match="per-batch-size depth"):  # a server that drafted 2 of 4 tokens half the time
        short = tmp_path / "short.txt"
        short.write_text(exposition(100, 300, 150, [70, 45, 25, 10]))
        from_metrics(
            store,
            read_counters([str(short)], None),
            model_name=None,
            drafter="eagle3-prod",
            cost_ratio=None,
            hardware=None,
            temperature=0.0,
            code_version="v",
        )
    store.close()
    drafter = tmp_path / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    newest = _cli(
        "autotune",
        "--engine",
        "vllm",
        "--target",
        MODEL,
        "--drafter",
        "eagle3-prod",
        "--drafter-path",
        str(drafter),
        workdir=tmp_path,
    )
    assert newest.returncode == 0, newest.stderr
    config = json.loads(shlex.split(newest.stdout)[1])
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 1, 3], [2, 8, 1], [9, 64, 0]]
    assert "newest of 2 active versions: condition production" in newest.stderr
    offline = _cli(
        "autotune",
        "--engine",
        "vllm",
        "--target",
        MODEL,
        "--drafter",
        "eagle3-prod",
        "--drafter-path",
        str(drafter),
        "--condition",
        "template+bos",
        workdir=tmp_path,
    )
    assert json.loads(shlex.split(offline.stdout)[1])["num_speculative_tokens_per_batch_size"] == [
        [1, 8, 3],
        [9, 64, 1],
    ]
    old = _cli(
        "autotune",
        "--engine",
        "vllm",
        "--engine-version",
        "0.23.0",
        "--target",
        MODEL,
        "--drafter",
        "eagle3-prod",
        "--drafter-path",
        str(drafter),
        workdir=tmp_path,
    )
    assert json.loads(shlex.split(old.stdout)[1]) == {
        "method": "eagle3",
        "model": str(drafter),
        "num_speculative_tokens": 3,
    }
    assert "vllm 0.23.0: num_speculative_tokens_per_batch_size arrived in 0.24.0" in old.stderr
    bad = _cli(
        "autotune",
        "--engine",
        "vllm",
        "--engine-version",
        "v-next",
        "--from-metrics",
        str(scrape),
        "--drafter-path",
        str(drafter),
        workdir=tmp_path,
    )
    assert bad.returncode == 1 and bad.stdout == "" and bad.stderr.count("\n") == 1
    assert "--engine-version: vllm: 'v-next' is not a release number" in bad.stderr
    assert len(json.loads(_cli("best", "--json", "--history", workdir=tmp_path).stdout)) == 2  # nothing stored


def test_offline_depth_zero_prints_no_config_and_exports_nothing(tmp_path):
    from test_real_vllm_metrics import _cli

    from db.store import Store

    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    exp = store.ensure_experiment(name="e", spec_hash="s", spec_yaml="name: e\n", code_version="v")
    store.link_job(exp, job_hash="select-0", kind="select_depth", name="select-0", config={})
    store.mark_running("select-0", mlflow_run_id=None)
    store.mark_done(
        "select-0",
        result={},
        rows=ChoiceRows(
            tuned=dict(
                experiment_id=exp,
                target="t",
                drafter="d",
                hardware="cpu 2t x1 float32",
                condition="default",
                temperature=0.0,
                depth=0,
                accept_len=1.0,
                speedup=1.0,
                cost_ratio=0.3,
                spec_hash="s",
                code_version="v",
                mlflow_run_id="r",
                drafter_job_hash="never-trained",
            )
        ),
    )
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
    config = json.loads(render("transformers", [(1, 4, 3), (5, 256, 1)], model="/draft", method="draft_model").text)
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
    out = model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        assistant_model=assistant,
        max_new_tokens=13,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )
    plain = model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=13,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )
    assert torch.equal(out, plain)
    # each round feeds the assistant what it has not seen, then 2 more single steps: 3 drafts a round
    starts = [i for i, n in enumerate(drafted) if n > 1]
    assert len(starts) >= 3 and starts[0] == 0
    assert all(b - a == 3 for a, b in zip(starts, starts[1:]))
    with pytest.raises(UserError, match="standalone draft model"):
        render("transformers", [(1, 4, 3)], model="/d", method="eagle3")
    with pytest.raises(UserError, match="batch-size-1 depth is 0"):
        render("transformers", [(1, 1, 0), (2, 8, 2)], model="/d", method="draft_model")


def test_vllm_draws_drafts_as_the_stored_curve_did():
    from pipeline.autotune.choice_row import sampling_of

    row = {"depth": 3, "schedule": None, "temperature": 0.7, "draft_sampling": "sampled"}
    sampled = render("vllm", schedule_of(row), model="/d", method="eagle3", draft_sampling=sampling_of(row))
    assert json.loads(shlex.split(sampled.text)[1])["draft_sample_method"] == "probabilistic"
    greedy = {**row, "draft_sampling": "greedy"}
    out = render("vllm", schedule_of(greedy), model="/d", method="eagle3", draft_sampling=sampling_of(greedy))
    assert json.loads(shlex.split(out.text)[1])["draft_sample_method"] == "greedy"
    decoding_greedily = {**row, "temperature": 0.0}  # at temperature 0 drafts are argmaxes whatever the rule
    assert sampling_of(decoding_greedily) is None
    old = render("vllm", schedule_of(row), model="/d", method="eagle3", version="0.20.0", draft_sampling="sampled")
    assert (
        "draft_sample_method" not in old.text and "the curve assumed drafts drawn from the drafter's q" in old.notes[0]
    )


def test_autotune_writes_the_tree_only_where_it_is_predicted_to_beat_the_chain(tmp_path):
    from pipeline.autotune import tuning as tune

    row = {
        "depth": 2,
        "tree": [[0], [1], [0, 0]],
        "tree_speedup": 1.3,
        "tree_chain_speedup": 1.2,
        "tree_all_batches": True,
    }
    assert tree_of(row) == [(0,), (1,), (0, 0)]
    assert tree_of({**row, "tree_all_batches": False}) is None  # larger batches chose smaller trees
    assert tree_of({**row, "tree_speedup": 1.1}) is None and tree_of({**row, "tree": []}) is None
    assert tree_of({"depth": 2}) is None  # versions from before trees, and production versions
    out = tune.render("sglang", schedule_of(row), model="/m", method="eagle3", config_dir=tmp_path, tree=tree_of(row))
    assert "--speculative-eagle-topk 2 --speculative-num-draft-tokens 4" in out.text
    chain = tune.render(
        "sglang",
        schedule_of(row),
        model="/m",
        method="eagle3",
        config_dir=tmp_path,
        tree=tree_of({**row, "tree_speedup": 1.1}),
    )
    assert "--speculative-eagle-topk 1 --speculative-num-draft-tokens 3" in chain.text
