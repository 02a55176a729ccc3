"""A drafter trained by a group of Ray Train workers (workers/runtime/ray_train.py): rank 0's steps
reach the job's progress while the group trains, each once and in order."""

from __future__ import annotations

import queue
import time

import pytest
from ray.util.queue import Empty

from pipeline.core import contracts as c
from pipeline.core.model_settings import Eagle3DrafterSpec
from tests.conftest import build_tiny_target
from workers.runtime.ray_train import _Relay, train_in_group


class Steps(queue.Queue):
    """The relay's side of a Ray queue, in this process."""

    def get(self, timeout=None):
        try:
            return super().get(timeout=timeout)
        except queue.Empty:
            raise Empty from None

    def get_nowait(self):
        return self.get(timeout=0.001)

    def shutdown(self):
        self.closed = True


def test_the_relay_shows_each_step_once_in_order_and_what_is_left_when_closed():
    steps, shown = Steps(), []
    relay = _Relay(lambda step, total, loss: shown.append((step, loss)), steps)
    steps.put([(1, 6, 0.9), (2, 6, 0.8)])
    steps.put([(3, 6, 0.7)])
    deadline = time.monotonic() + 10
    while len(shown) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert shown == [(1, 0.9), (2, 0.8), (3, 0.7)]  # shown while the group trains, not at its end
    steps.put([(2, 6, 0.85), (3, 6, 0.75), (4, 6, 0.6)])  # a group restarted from its step-1 checkpoint
    relay.close()
    steps.put([(5, 6, 0.5)])  # nothing is shown after close
    assert shown == [(1, 0.9), (2, 0.8), (3, 0.7), (4, 0.6)] and steps.closed


def test_a_queue_that_fails_ends_the_showing_not_the_training():
    class Gone(Steps):
        def get(self, timeout=None):
            raise RuntimeError("the queue's actor died")

        def shutdown(self):
            raise RuntimeError("the queue's actor died")

    relay, shown = _Relay(lambda *step: shown.append(step), Gone()), []
    relay.thread.join(timeout=10)
    assert not relay.thread.is_alive()
    relay.close()  # says nothing: the training's own outcome is what the job reports
    assert shown == []


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.long
def test_a_groups_steps_arrive_while_it_trains(tmp_path, monkeypatch):
    import ray
    from ray.train.torch import TorchTrainer

    fit, ended = TorchTrainer.fit, []

    def timed_fit(self):
        try:
            return fit(self)
        finally:
            ended.append(time.monotonic())

    monkeypatch.setattr(TorchTrainer, "fit", timed_fit)

    monkeypatch.setenv("SPECFLEET_TRAIN_STORAGE", str(tmp_path / "storage"))
    spec = Eagle3DrafterSpec(
        name="e",
        norm="post",
        fc_norm=True,
        train={"steps": 30, "lr": 3e-3, "batch_size": 4, "seq_len": 32, "corpus": "stdlib", "ttt_depth": 2},
    )
    group = c.WorkerGroup(workers=2, sharding="ddp", num_cpus=1, num_gpus=0)
    config = c.TrainDrafterConfig(seed=0, device="cpu", target=c.TargetRef(name="t"), drafter=spec, group=group)
    _, _, files = build_tiny_target()
    seen: list[tuple[float, int]] = []
    ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
    try:
        _, metrics = train_in_group(
            config,
            {"target": c.Trained(metrics={}, files=files)},
            run_name="live-steps",
            progress=lambda step, total, loss: seen.append((time.monotonic(), step)),
        )
    finally:
        ray.shutdown()
    assert [step for _, step in seen] == list(range(1, 31))
    # one batch every half second: the first steps were shown while the group still trained
    assert seen[0][0] < ended[0] - 0.2, (seen[0], ended, metrics)
    assert metrics["resumed_at_step"] == 0
    assert 0 < metrics["checkpoint_seconds"] < metrics["train_seconds"]  # ten reports of the state, timed apart
