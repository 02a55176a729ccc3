"""The two MTP recipes: vanilla trains chain step 0, recursive unrolls the layer with step weights
0.6^s normalised; the checkpoint holds what training changed and loads back against the target."""

from __future__ import annotations

import safetensors.torch
import torch

from workers.drafters.chain.loss import chain_loss
from workers.drafters.mtp.checkpoint import FROZEN, load_mtp
from workers.drafters.mtp.train import step_weights


def test_step_weights_of_each_recipe():
    assert step_weights("vanilla", 3) == [1.0]
    weights = step_weights("recursive", 3)
    assert abs(sum(weights) - 1.0) < 1e-12
    torch.testing.assert_close(torch.tensor(weights), torch.tensor([1.0, 0.6, 0.36]) / 1.96)


def test_each_recipe_reports_the_steps_it_trained(tiny_target):
    from pipeline.core.model_settings import MtpDrafterSpec
    from workers.drafters.mtp.train import train_mtp

    target, tokenizer, _ = tiny_target
    reported = {}
    for recipe in ("vanilla", "recursive"):
        train = {"steps": 3, "batch_size": 2, "seq_len": 32, **({"ttt_depth": 3} if recipe == "recursive" else {})}
        spec = MtpDrafterSpec(name=recipe, kind="mtp", recipe=recipe, train=train)
        _, metrics = train_mtp(target=target, tokenizer=tokenizer, spec=spec, seed=0, device=torch.device("cpu"))
        reported[recipe] = sorted(k for k in metrics if k.startswith("val_top1_step"))
        assert metrics["tokens_seen"] == 3 * 2 * 32 and metrics["val_loss"] > 0
        assert metrics["checkpoint_seconds"] == 0  # one process reports no state
    assert reported == {"vanilla": ["val_top1_step0"], "recursive": [f"val_top1_step{s}" for s in range(3)]}


def test_the_loss_is_the_weighted_sum_of_the_steps_losses(tiny_target, tiny_mtp_heads):
    from workers.models.features import HeadRows, target_pass

    target, tokenizer, _ = tiny_target
    head, _ = tiny_mtp_heads["recursive-post"]
    ids = torch.tensor([tokenizer("def f(x):\n    return x * 2 + 1\n")["input_ids"]])
    streams, logits = target_pass(target, ids, head.cfg.capture_layers, HeadRows(target).select(None))
    with torch.no_grad():
        per_step = [chain_loss(head, streams, logits, ids, [0.0] * s + [1.0])[0] for s in range(3)]
        total, agree = chain_loss(head, streams, logits, ids, step_weights("recursive", 3))
    expected = sum(w * loss for w, loss in zip(step_weights("recursive", 3), per_step))
    torch.testing.assert_close(total, expected)
    assert len(agree) == 3 and all(0.0 <= a <= 1.0 for a in agree)
    assert per_step[2] > per_step[0]  # deeper steps are harder


def test_the_checkpoint_leaves_out_the_targets_weights_and_loads_back(tiny_target, tiny_mtp_heads, tmp_path):
    from pipeline.core.files import write_dir

    target, _, _ = tiny_target
    head, files = tiny_mtp_heads["recursive-post"]
    stored = safetensors.torch.load(files["model.safetensors"])
    assert not set(FROZEN) & set(stored) and "proj.weight" in stored
    folder = write_dir(files, tmp_path / "head")
    back = load_mtp(folder, target=target, device="cpu", dtype=torch.float32)
    for name, tensor in head.state_dict().items():
        torch.testing.assert_close(back.state_dict()[name], tensor, msg=name)
    assert torch.equal(back.lm_head.weight, target.get_output_embeddings().weight)
    (folder / "model.safetensors").write_bytes(files["model.safetensors"][:64])
    try:
        load_mtp(folder, target=target, device="cpu", dtype=torch.float32)
    except RuntimeError as exc:
        assert "model.safetensors" in str(exc) and str(folder) in str(exc)
    else:
        raise AssertionError("a cut checkpoint loaded")
