"""resources.<kind>.time_limit_s: a job that runs longer is stopped on Ray and fails, naming the limit;
the jobs that needed it fail as not run, naming it. The run starts its own local Ray cluster although
another one runs on this machine (the two-node one of test_end_to_end), and leaves that one alone."""

from __future__ import annotations

import pytest
import yaml

from db.store import Store
from tests.integration.test_end_to_end import specfleet

SPEC = {
    "name": "tl",
    "targets": [
        {
            "name": "t",
            "builtin": {
                "layers": 4,
                "hidden_size": 64,
                "heads": 4,
                "intermediate_size": 128,
                "vocab_size": 400,
                "train": {"steps": 1_000_000, "batch_size": 8, "seq_len": 64},
            },
        }
    ],
    "drafters": [{"name": "d"}],
    "resources": {"train_target": {"num_cpus": 1, "time_limit_s": 1}},
}


@pytest.mark.slow
@pytest.mark.ray
def test_a_job_past_its_time_limit_is_stopped_and_named(tmp_path, ray_cluster):
    (tmp_path / "tl.yaml").write_text(yaml.safe_dump(SPEC))
    done = specfleet("run", "tl.yaml", cwd=tmp_path)  # no --address: a cluster of its own
    assert done.returncode == 1, done.stderr[-2000:]
    assert "on 1 node(s)" in done.stdout  # not the running two-node cluster
    with Store(f"sqlite:///{tmp_path / '.specfleet' / 'specfleet.db'}") as store:
        jobs = {j["name"]: j for j in store.jobs()}
    target = jobs["train_target t"]
    assert target["status"] == "failed" and "resources.train_target.time_limit_s = 1 s" in target["error"]
    assert 1 <= target["duration_s"] < 30  # stopped, not trained to the end (a million steps)
    assert jobs["train_drafter t/d"]["error"] == "not run: its input train_target t failed"
