"""resources.<kind>.accelerator_type: timing jobs land on the GPU model asked for, and that model is
part of their identity, so costs timed on one GPU generation are never reused for another."""
from __future__ import annotations

import pytest
import yaml

from pipeline.errors import ResourceError, SpecError
from pipeline.executor import fit_on_nodes
from pipeline.plan import build_plan
from pipeline.spec import parse_spec

NODES = [{"CPU": 16.0, "GPU": 8.0, "accelerator_type:H100": 1.0}, {"CPU": 8.0, "GPU": 4.0, "accelerator_type:L4": 1.0}]


def test_a_gpu_model_no_node_has_is_refused_naming_the_models_there():
    assert fit_on_nodes({"profile_cost": (4, 1, "H100")}, NODES).startswith("2 node(s)")
    with pytest.raises(ResourceError, match=r"resources.profile_cost.accelerator_type: no node has a B200 GPU "
                                            r"\(cluster: 2 node\(s\), 24 CPU, 12 GPU in all; GPU models: H100, L4\)"):
        fit_on_nodes({"train_drafter": (1, 1, None), "profile_cost": (4, 1, "B200")}, NODES)


def _spec(accelerator: str | None) -> str:
    gpu = {"num_cpus": 2, "num_gpus": 1, **({"accelerator_type": accelerator} if accelerator else {})}
    return yaml.safe_dump({"name": "a", "targets": [{"name": "t", "builtin": {}}], "drafters": [{"name": "d"}],
                           "validation": {"num_prompts": 2},
                           "resources": {"profile_cost": gpu, "measure_speedup": gpu}})


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
    text = yaml.safe_dump({"name": "a", "targets": [{"name": "t", "builtin": {}}], "drafters": [{"name": "d"}],
                           "resources": {"profile_cost": {"num_cpus": 2, "accelerator_type": "H100"}}})
    with pytest.raises(SpecError, match="accelerator_type H100 needs num_gpus > 0"):
        parse_spec(text)
