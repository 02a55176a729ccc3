"""resources.<kind>.accelerator_type: timing jobs land on the GPU model asked for, and that model is
part of their identity, so costs timed on one GPU generation are never reused for another."""

from __future__ import annotations

import pytest
import yaml

from pipeline.core.contracts import WorkerEnv
from pipeline.errors import ResourceError, SpecError
from pipeline.plan import build_plan
from pipeline.run.resources import fit_on_nodes
from pipeline.spec import parse_spec
from workers.runtime.environment import gpus_here

NODES = [{"CPU": 16.0, "GPU": 8.0, "accelerator_type:H100": 1.0}, {"CPU": 8.0, "GPU": 4.0, "accelerator_type:L4": 1.0}]


def test_a_gpu_model_no_node_has_is_refused_naming_the_models_there():
    assert fit_on_nodes({"profile_cost": (4, 1, "H100")}, NODES).startswith("2 node(s)")
    with pytest.raises(
        ResourceError,
        match=r"resources.profile_cost.accelerator_type: no node has a B200 GPU "
        r"\(cluster: 2 node\(s\), 24 CPU, 12 GPU in all; GPU models: H100, L4\)",
    ):
        fit_on_nodes({"train_drafter": (1, 1, None), "profile_cost": (4, 1, "B200")}, NODES)


def _spec(accelerator: str | None) -> str:
    gpu = {"num_cpus": 2, "num_gpus": 1, **({"accelerator_type": accelerator} if accelerator else {})}
    return yaml.safe_dump(
        {
            "name": "a",
            "targets": [{"name": "t", "builtin": {}}],
            "drafters": [{"name": "d"}],
            "validation": {"num_prompts": 2},
            "resources": {"profile_cost": gpu, "measure_speedup": gpu},
        }
    )


def test_the_gpu_model_is_part_of_a_timing_jobs_identity_only():
    def hashes(accelerator):
        plan = build_plan(parse_spec(_spec(accelerator)), "v")
        return {j.kind: j.hash for j in plan.jobs}, {j.kind: j.accelerator_type for j in plan.jobs}

    (h100, placed), (l4, _), (unnamed, _) = hashes("H100"), hashes("L4"), hashes(None)
    for kind in ("profile_cost", "measure_speedup"):
        assert len({h100[kind], l4[kind], unnamed[kind]}) == 3 and placed[kind] == "H100"
    for kind in ("train_target", "train_drafter", "measure_curve"):
        assert h100[kind] == l4[kind] == unnamed[kind]


def test_a_gpu_model_without_gpus_is_a_spec_error():
    text = yaml.safe_dump(
        {
            "name": "a",
            "targets": [{"name": "t", "builtin": {}}],
            "drafters": [{"name": "d"}],
            "resources": {"profile_cost": {"num_cpus": 2, "accelerator_type": "H100"}},
        }
    )
    with pytest.raises(SpecError, match="accelerator_type H100 needs num_gpus > 0"):
        parse_spec(text)


WORKER = WorkerEnv(
    device="NVIDIA H100 80GB HBM3", cuda="12.4", driver="550.54.15", torch="2.5.1", transformers="4.48.0"
)


def test_what_the_worker_reports_is_part_of_a_timing_jobs_identity_only():
    spec = parse_spec(_spec("H100"))

    def hashes(worker):
        return {j.kind: j.hash for j in build_plan(spec, "v", worker).jobs}

    old, new_driver, new_gpu = (
        hashes(WORKER),
        hashes(WORKER.model_copy(update={"driver": "560.28.03"})),
        hashes(WORKER.model_copy(update={"device": "NVIDIA B200"})),
    )
    for kind in ("profile_cost", "select_depth", "measure_speedup"):  # the timings, and what was chosen from them
        assert len({old[kind], new_driver[kind], new_gpu[kind]}) == 3
    for kind in ("train_target", "train_drafter", "measure_curve"):
        assert old[kind] == new_driver[kind] == new_gpu[kind]


def test_a_timing_job_that_lands_on_another_kind_of_worker_refuses_to_run():
    from workers.jobs.run import run_job

    plan = build_plan(parse_spec(_spec(None).replace("num_gpus: 1", "num_gpus: 0")), "v", WORKER)
    job = next(j for j in plan.jobs if j.kind == "profile_cost")
    with pytest.raises(
        RuntimeError,
        match=r"profile_cost was planned for another kind of worker than it landed on "
        r"\(device NVIDIA H100 80GB HBM3 -> cpu .*driver 550.54.15 -> none.*pin "
        r"resources.profile_cost.accelerator_type",
    ):
        run_job(job.kind, job.config, {}, num_cpus=1, num_gpus=0)


def test_the_local_probe_is_this_machine_and_refuses_gpus_it_does_not_have():
    from pipeline.run.probe import probe_worker
    from workers.runtime.environment import worker_env

    here = probe_worker(parse_spec(_spec(None).replace("num_gpus: 1", "num_gpus: 0")))
    assert here == worker_env(0) and here.device.startswith("cpu ") and here.cuda == "none"
    if gpus_here() == 0:
        with pytest.raises(
            ResourceError,
            match=r"resources.profile_cost.num_gpus: a profile_cost job asks for 1 "
            r"GPU\(s\) but this machine has 0",
        ):
            probe_worker(parse_spec(_spec(None)))


def test_a_rerun_on_another_worker_times_again_and_reuses_everything_else(tmp_path):
    """Against one shared database: the same spec on a new GPU generation reruns its cost profiles,
    depth choices and engine benchmarks, and reuses its trained models and curves."""
    from rich.console import Console
    from test_executor import SPEC, answer

    from db.store import Store
    from pipeline.run.executor import run_plan
    from pipeline.run.local_cluster import LocalCluster
    from pipeline.run.tracking import Tracker

    spec = parse_spec(yaml.safe_dump(SPEC))
    store = Store(f"sqlite:///{tmp_path / 'specfleet.db'}")
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", str(tmp_path / "artifacts"))
    ran = []
    for worker in (WORKER, WORKER.model_copy(update={"device": "NVIDIA B200", "cuda": "12.8"})):
        plan = build_plan(spec, "v1", worker)
        summary = run_plan(
            plan,
            spec=spec,
            spec_text="",
            store=store,
            tracker=tracker,
            workdir=tmp_path,
            connect=lambda: LocalCluster(answer),
            console=Console(quiet=True),
        )
        ran.append(sorted(plan.by_hash()[h].kind for h in summary.done))
    store.close()
    assert len(ran[0]) == 11
    assert ran[1] == ["measure_speedup"] * 2 + ["profile_cost"] * 2 + ["select_depth"] * 2


def test_a_request_an_autoscaler_can_meet_is_not_refused():
    cpu_only = [{"CPU": 4.0}]
    gpu_type = {"CPU": 16.0, "GPU": 8.0, "accelerator_type:H100": 1.0}
    asks = {"train_drafter": (1, 0, None), "profile_cost": (4, 1, "H100")}
    with pytest.raises(ResourceError, match="resources.profile_cost.accelerator_type: no node has a H100 GPU"):
        fit_on_nodes(asks, cpu_only)  # no autoscaler: it would wait forever
    assert "the autoscaler adds nodes of 16 CPU/8 GPU" in fit_on_nodes(asks, cpu_only, [gpu_type])
    assert "an autoscaler adds what jobs wait for" in fit_on_nodes(asks, cpu_only, [])  # its types unknown
    with pytest.raises(
        ResourceError,
        match=r"num_gpus: a profile_cost job asks for 16 GPU\(s\) but the largest node "
        r"has 8 .*no node type the autoscaler adds has it either",
    ):
        fit_on_nodes({"profile_cost": (4, 16, None)}, cpu_only, [gpu_type])
    # a kind the nodes there meet is not refused for want of an autoscaler type that has it
    assert "the autoscaler adds nodes of 2 CPU/1 GPU" in fit_on_nodes(
        {"measure_curve": (4, 0, None), "profile_cost": (1, 1, None)}, cpu_only, [{"CPU": 2, "GPU": 1}]
    )
    # one node must have everything a job asks for at once: 16 CPUs here and a GPU there is no place for it
    with pytest.raises(
        ResourceError,
        match=r"resources.profile_cost: no single node has 16 CPU\(s\) and 1 GPU\(s\) "
        r"at once .*no node type the autoscaler adds has it either",
    ):
        fit_on_nodes({"profile_cost": (16, 1, None)}, [{"CPU": 16.0}], [{"CPU": 2, "GPU": 1}])
    with pytest.raises(ResourceError, match=r"no single node has 4 CPU\(s\) and 1 GPU\(s\) of model H100 at once"):
        fit_on_nodes(
            {"profile_cost": (4, 1, "H100")}, [{"CPU": 16.0, "accelerator_type:H100": 1.0}, {"CPU": 2.0, "GPU": 1.0}]
        )


def test_a_group_of_workers_must_fit_the_nodes_at_once():
    group = {"train_drafter": (4, 1, None)}  # each worker: 4 CPUs and a GPU
    assert fit_on_nodes(group, NODES, groups={"train_drafter": 6}).startswith("2 node(s)")  # 4 + 2 workers
    with pytest.raises(
        ResourceError,
        match=r"resources.train_drafter.workers: 7 workers of 4 CPU\(s\) and 1 GPU\(s\) each, but the nodes "
        r"hold 6 at once",
    ):
        fit_on_nodes(group, NODES, groups={"train_drafter": 7})
    # an autoscaler that adds 8-GPU nodes can hold them
    assert "autoscaler" in fit_on_nodes(group, NODES, [{"CPU": 32, "GPU": 8}], groups={"train_drafter": 7})


def _group_spec(resources: dict, batch_size: int = 8, kind: str = "eagle3") -> str:
    drafter = {"name": "d", "kind": kind}
    drafter.update({"builtin": {}} if kind == "standalone" else {"train": {"batch_size": batch_size}})
    return yaml.safe_dump(
        {
            "name": "a",
            "targets": [{"name": "t", "builtin": {}}],
            "drafters": [drafter],
            "resources": resources,
        }
    )


def test_a_drafter_trained_by_a_group_names_its_workers_and_sharding_but_not_what_each_has():
    def job(resources):
        (train,) = [j for j in build_plan(parse_spec(_group_spec(resources)), "v").jobs if j.kind == "train_drafter"]
        return train

    one = job({})
    ddp = job({"train_drafter": {"workers": 2, "num_cpus": 1}})
    wider = job({"train_drafter": {"workers": 2, "num_cpus": 3}})
    fsdp = job({"train_drafter": {"workers": 2, "num_cpus": 1, "sharding": "fsdp"}})
    four = job({"train_drafter": {"workers": 4, "num_cpus": 1}})
    assert one.config.group is None and (ddp.config.group.workers, ddp.config.group.sharding) == (2, "ddp")
    assert len({one.hash, ddp.hash, fsdp.hash, four.hash}) == 4 and wider.hash == ddp.hash
    # the job's own task holds nothing: its workers hold what the resources give each
    assert (ddp.num_cpus, ddp.num_gpus) == (0, 0) and ddp.config.group.num_cpus == 1


@pytest.mark.parametrize(
    "resources,extra,message",
    [
        ({"measure_curve": {"workers": 2}}, {}, "resources.measure_curve.workers: only train_drafter jobs run on"),
        ({"train_drafter": {"workers": 3}}, {}, "drafters[0].train.batch_size: 8 rows do not split over the 3"),
        ({"train_drafter": {"workers": 2}}, {"kind": "standalone"}, "drafters[0] (d) is a standalone draft model"),
        ({"train_drafter": {"sharding": "fsdp"}}, {}, "sharding: fsdp shards over several workers; set workers > 1"),
    ],
)
def test_a_group_the_spec_cannot_run_is_refused_in_one_line(resources, extra, message):
    with pytest.raises(SpecError) as info:
        parse_spec(_group_spec(resources, **extra))
    assert any(message in m for m in info.value.messages), info.value.messages


def test_the_in_process_cluster_refuses_a_group():
    from pipeline.run.local_cluster import LocalCluster

    with pytest.raises(ResourceError, match="resources.train_drafter.workers: a group of workers trains on Ray"):
        LocalCluster(cpus=2).check_resources({"train_drafter": (1, 0, None)}, {"train_drafter": 2})


def test_a_target_split_over_gpus_needs_them_on_one_node():
    # the 8-GPU node holds a target split over 8; 12 GPUs in all do not make a 12-GPU node
    assert fit_on_nodes({"measure_curve": (16, 8, None)}, NODES).startswith("2 node(s)")
    with pytest.raises(ResourceError, match=r"resources.measure_curve"):
        fit_on_nodes({"measure_curve": (16, 12, None)}, NODES)
