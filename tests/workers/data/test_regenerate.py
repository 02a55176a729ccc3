"""Drafter training data from the target itself: regenerated answers, the target's stored states
over them, drafters trained from those, and the plan that shares them between drafters."""

from __future__ import annotations

import pytest
import torch

from pipeline.core import contracts as c
from pipeline.core.model_settings import Eagle3DrafterSpec, StandaloneDrafterSpec
from pipeline.core.settings import TrainingData
from workers.data.regenerate import answer_batch, load_text, question_prompts
from workers.data.target_features import FeatureBatches
from workers.jobs.run import run_job
from workers.models.features import HeadRows, target_pass

DATA = TrainingData(tokens=3000, max_new_tokens=24, max_prompt_tokens=96, batch_size=8)


def test_a_target_pass_computes_logits_only_over_the_rows_asked_for(tiny_target):
    """The logits of a pass are the target's own (all ids, or a draft vocabulary's columns, in its
    order), and a pass that is not asked for logits computes them for the last position only."""
    target = tiny_target[0]
    ids = torch.randint(0, target.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = target(input_ids=ids, use_cache=False).logits.float()
    head = HeadRows(target)
    streams, logits = target_pass(target, ids, (1, 2), head.select(None))
    assert (
        torch.allclose(logits, full, atol=1e-4)
        and [s.shape for s in streams] == [(2, 24, target.config.hidden_size)] * 2
    )
    vocab = torch.tensor([7, 3, 100, 11])
    _, some = target_pass(target, ids, (1,), head.select(vocab))
    assert torch.allclose(some, full[..., vocab], atol=1e-4)
    assert target_pass(target, ids, (1,))[1] is None
    seen = []
    hook = target.lm_head.register_forward_hook(lambda m, args, out: seen.append(tuple(out.shape)))
    try:
        target_pass(target, ids, (1,))
    finally:
        hook.remove()
    assert seen == [(2, 1, target.config.vocab_size)]


@pytest.fixture(scope="module")
def regenerated(tiny_target):
    _, _, files = tiny_target
    config = c.RegenerateConfig(seed=0, device="cpu", target=c.TargetRef(name="t"), data=DATA)
    steps = []
    result = run_job(
        "regenerate",
        config,
        {"target": c.Trained(metrics={}, files=files)},
        num_cpus=2,
        num_gpus=0,
        progress=lambda step, total, loss: steps.append((step, total)),
    )
    return result, steps


def test_the_target_answers_the_training_questions_itself(tiny_target, regenerated):
    target, tokenizer, _ = tiny_target
    result, steps = regenerated
    text = load_text(result)
    assert result.metrics["tokens"] == text.ids.numel() >= DATA.tokens
    assert steps[-1] == (DATA.tokens, DATA.tokens) and len(steps) > 1  # progress, batch by batch
    prompts = question_prompts(tokenizer, DATA.max_prompt_tokens, 0)
    bounds = text.bounds()
    assert len(bounds) == result.metrics["samples"] == text.starts.numel()
    eos = tokenizer.eos_token_id
    for n in (0, 5, 9):  # each sample is a training question, then the target's own greedy answer
        a, b = bounds[n]
        prompt = prompts[n]
        sample = text.ids[a:b].tolist()
        assert sample[: len(prompt)] == prompt and sample[0] == tokenizer.bos_token_id
        alone = answer_batch(
            target,
            [prompt],
            max_new=DATA.max_new_tokens,
            temperature=0.0,
            eos=eos,
            pad=tokenizer.pad_token_id,
            gen=None,
        )[0]
        assert sample[len(prompt) :] == alone  # left padding in a batch changed nothing
        # exactly the positions that predict an answer token carry a loss
        scored = text.scored[a:b].tolist()
        assert scored == [False] * (len(prompt) - 1) + [True] * len(alone) + [False]


def test_stored_states_are_the_targets_and_give_its_logits(tiny_target, regenerated):
    target, _, files = tiny_target
    text = load_text(regenerated[0])
    config = c.TargetFeaturesConfig(
        seed=0, device="cpu", target=c.TargetRef(name="t"), rules=[{"fusion": "tri", "capture_layers": None}]
    )
    inputs = {"target": c.Trained(metrics={}, files=files), "data": regenerated[0]}
    features = run_job("target_features", config, inputs, num_cpus=2, num_gpus=0)
    assert features.metrics["tokens"] == text.ids.numel() and features.metrics["layers"] == 4  # 3 + final
    capture = (1, 2, 3)  # the tri default of a 4-layer target
    batches = FeatureBatches(target, text, features, capture)
    ids, streams, logits, mask = batches.sample(4, 120, torch.Generator().manual_seed(0), "cpu")
    n = min(b - a for a, b in text.bounds())
    for r in range(4):  # each window starts a sample: over that sample, a target pass sees the same context
        live_streams, live_logits = target_pass(target, ids[r : r + 1], capture, HeadRows(target).select(None))
        for got, want in zip(streams, live_streams):
            assert torch.allclose(got[r, :n], want[0, :n], atol=2e-2, rtol=1e-2)
        assert (logits[r, :n].argmax(-1) == live_logits[0, :n].argmax(-1)).float().mean() > 0.97
    assert mask.dtype == torch.bool and mask.any() and not mask.all()
    with pytest.raises(RuntimeError, match=r"layers \[7\] were not stored"):
        FeatureBatches(target, text, features, (7,))
    with pytest.raises(RuntimeError, match="cannot read features.safetensors"):
        FeatureBatches(target, text, c.Dataset(metrics={}, files={"features.safetensors": b"garbage"}), capture)


@pytest.fixture(scope="module")
def features(tiny_target, regenerated):
    _, _, files = tiny_target
    config = c.TargetFeaturesConfig(
        seed=0, device="cpu", target=c.TargetRef(name="t"), rules=[{"fusion": "tri", "capture_layers": None}]
    )
    return run_job(
        "target_features",
        config,
        {"target": c.Trained(metrics={}, files=files), "data": regenerated[0]},
        num_cpus=2,
        num_gpus=0,
    )


def test_drafters_train_on_the_regenerated_text(tiny_target, regenerated, features):
    _, _, files = tiny_target
    target = c.Trained(metrics={}, files=files)
    eagle = Eagle3DrafterSpec(
        name="e",
        norm="post",
        fc_norm=True,
        draft_vocab=128,
        train={"ttt_depth": 2, "steps": 6, "batch_size": 4, "seq_len": 120, "corpus": "regenerated"},
    )
    config = c.TrainDrafterConfig(seed=0, device="cpu", target=c.TargetRef(name="t"), drafter=eagle)
    trained = run_job(
        "train_drafter",
        config,
        {"target": target, "data": regenerated[0], "features": features},
        num_cpus=2,
        num_gpus=0,
    )
    assert trained.metrics["data_tokens"] == regenerated[0].metrics["tokens"]
    assert trained.metrics["tokens_seen"] == 6 * 4 * 120 and trained.metrics["val_loss"] > 0
    with pytest.raises(ValueError, match="needs the target's regenerated text and features"):
        run_job("train_drafter", config, {"target": target}, num_cpus=2, num_gpus=0)

    small = StandaloneDrafterSpec(
        name="s",
        kind="standalone",
        builtin={
            "layers": 1,
            "hidden_size": 32,
            "heads": 2,
            "intermediate_size": 64,
            "train": {"steps": 5, "batch_size": 4, "seq_len": 120, "corpus": "regenerated"},
        },
    )
    config = c.TrainDrafterConfig(seed=0, device="cpu", target=c.TargetRef(name="t"), drafter=small)
    distilled = run_job("train_drafter", config, {"target": target, "data": regenerated[0]}, num_cpus=2, num_gpus=0)
    assert distilled.metrics["data_tokens"] == regenerated[0].metrics["tokens"]
    assert distilled.metrics["train_loss"] == distilled.metrics["train_loss"]  # a number: answers were scored


def test_answer_only_labels_mask_the_prompts(regenerated):
    text = load_text(regenerated[0])
    ids, labels = text.lm_batch("train", 3, 120, torch.Generator().manual_seed(1))
    kept = labels != -100
    assert torch.equal(labels[kept], ids[kept]) and kept.any() and not kept.all()
    rows = text.sample_rows("train", 3, 120, torch.Generator().manual_seed(1))
    assert torch.equal(kept[:, 1:], text.scored[rows][:, :-1])
    held = text.sample_rows("heldout", 50, 40, torch.Generator().manual_seed(2))
    train = text.sample_rows("train", 200, 40, torch.Generator().manual_seed(2))
    assert int(train.max()) < int(held.min())  # no training window reads a held-out token, nor the reverse
    lo, hi = text.split_bounds("heldout")
    assert hi == text.ids.numel() and lo in text.starts.tolist() and text.split_bounds("train") == (0, lo)
    # a text too small to split, or windows longer than a split, are refused before training
    one = text._replace(starts=text.starts[:1])
    with pytest.raises(ValueError, match="cannot be split into training and held-out"):
        one.check_windows(8)
    with pytest.raises(ValueError, match="no train sample starts a window of 100000 tokens"):
        text.check_windows(100_000)
    with pytest.raises(ValueError, match="no heldout sample starts a window of"):
        text.check_windows(hi - lo + 1)  # fits the training text, not the held-out block


def test_corrupt_or_mismatched_training_data_is_named(tiny_target, regenerated, features):
    target, _, _ = tiny_target
    with pytest.raises(RuntimeError, match="regenerated text: cannot read tokens.safetensors"):
        load_text(c.Dataset(metrics={}, files={"tokens.safetensors": b"not a safetensors file"}))
    with pytest.raises(RuntimeError, match="regenerated text: cannot read tokens.safetensors"):
        load_text(c.Dataset(metrics={}, files={}))
    text = load_text(regenerated[0])
    short = text._replace(ids=text.ids[:-5], scored=text.scored[:-5])
    with pytest.raises(
        RuntimeError, match=rf"{text.ids.numel()} positions for a text of {text.ids.numel() - 5} tokens"
    ):
        FeatureBatches(target, short, features, (1, 2, 3))


def test_states_too_large_for_float16_are_kept_in_float32_layer_by_layer(tiny_target, regenerated, monkeypatch):
    import safetensors.torch

    import workers.data.target_features as tf

    target, _, _ = tiny_target
    text = load_text(regenerated[0])
    small = text._replace(
        ids=text.ids[: int(text.starts[3])], scored=text.scored[: int(text.starts[3])], starts=text.starts[:3]
    )
    files, _ = tf.compute_features(target, small, (1, 2, 3))
    stored = safetensors.torch.load(files[tf.FILE])
    assert {k: t.dtype for k, t in stored.items()} == {f"hidden_states.{i}": torch.float16 for i in (1, 2, 3, 4)}
    peaks = {i: stored[f"hidden_states.{i}"].float().abs().max().item() for i in (1, 2, 3, 4)}
    big, small_layer = max(peaks, key=peaks.get), min(peaks, key=peaks.get)
    assert peaks[big] > peaks[small_layer]
    # as if one layer held a massive activation: that layer alone goes to float32
    monkeypatch.setattr(tf, "FP16_MAX", (peaks[big] + peaks[small_layer]) / 2)
    together = safetensors.torch.load(tf.compute_features(target, small, (1, 2, 3))[0][tf.FILE])
    assert together[f"hidden_states.{big}"].dtype == torch.float32
    assert together[f"hidden_states.{small_layer}"].dtype == torch.float16
    # a layer's values do not depend on the layers computed beside it (a drafter's training reads
    # the shared pass as it would read a pass of its own layers)
    alone = safetensors.torch.load(tf.compute_features(target, small, (small_layer,))[0][tf.FILE])
    assert torch.equal(alone[f"hidden_states.{small_layer}"], together[f"hidden_states.{small_layer}"])
