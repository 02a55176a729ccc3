"""The distill_drafter job on the tiny target's trained post-norm drafter: each method trains the
checkpoint it was given for the stage's optimizer steps and returns one of the same layout; Draft-OPD
and its ablation roll out every round and say how the drafter decoded then."""

from __future__ import annotations

import pytest
import torch
from conftest import TINY_DRAFT_TRAIN

from pipeline.core import contracts as c
from pipeline.core.files import cached_dir
from pipeline.core.model_settings import Eagle3DrafterSpec
from workers.drafters.eagle3.checkpoint import load_eagle3
from workers.jobs.run import run_job

pytestmark = pytest.mark.slow

STAGE = dict(rounds=2, prompts=4, max_new_tokens=12, depth=3, steps_per_round=2, batch_size=2, lr=1e-3)


def _distilled(tiny_target, tiny_drafters, method: str):
    target, _, target_files = tiny_target
    _, files = tiny_drafters["post"]
    spec = Eagle3DrafterSpec(
        name="post", norm="post", fc_norm=True, train=TINY_DRAFT_TRAIN, distill={**STAGE, "method": method}
    )
    config = c.DistillDrafterConfig(
        seed=0, device="cpu", target=c.TargetRef(name="t"), drafter=spec, max_prompt_tokens=96
    )
    inputs = {
        "target": c.Trained(metrics={}, files=target_files),
        "drafter": c.Trained(family="eagle3", metrics={}, files=files),
    }
    steps = []
    result = run_job(
        "distill_drafter", config, inputs, num_cpus=2, num_gpus=0, progress=lambda s, n, loss: steps.append((s, n))
    )
    embedding = target.get_input_embeddings().weight
    before = load_eagle3(cached_dir(files), embedding=embedding, device="cpu", dtype=torch.float32)
    after = load_eagle3(cached_dir(result.files), embedding=embedding, device="cpu", dtype=torch.float32)
    return result, steps, before, after


@pytest.mark.parametrize("method", ["opd", "opd_random_anchor", "imitation"])
def test_each_method_trains_the_checkpoint_it_was_given(tiny_target, tiny_drafters, method):
    result, steps, before, after = _distilled(tiny_target, tiny_drafters, method)
    assert result.family == "eagle3" and steps[-1] == (4, 4) and result.metrics["distill_steps"] == 4
    assert after.cfg == before.cfg
    assert not torch.equal(after.fc.weight, before.fc.weight)  # it was trained
    assert torch.equal(after.embed.weight, before.embed.weight)  # the target's, frozen
    rolled = sorted(k for k in result.metrics if k.startswith("rollout_tokens_per_pass"))
    if method == "imitation":
        assert rolled == []
        return
    assert rolled == ["rollout_tokens_per_pass_round0", "rollout_tokens_per_pass_round1"]
    assert all(1.0 <= result.metrics[k] <= 4.0 for k in rolled)  # 1 .. depth + 1 tokens a pass
    assert result.metrics["last_accepted_positions"] > 0
