"""The real-model path: a Hugging Face folder as the target, and clear errors for bad checkpoints."""

from __future__ import annotations

import pytest
import torch

from pipeline.core import contracts as c
from pipeline.core.model_settings import Eagle3DrafterSpec, StandaloneDrafterSpec
from pipeline.core.settings import CostTiming, Evaluation, TimedPrompts
from workers.jobs.run import run_job

DRAFTER = Eagle3DrafterSpec(
    name="d",
    norm="post",
    fc_norm=True,
    fusion="tri",
    train={"ttt_depth": 2, "steps": 3, "lr": 3e-3, "batch_size": 4, "seq_len": 32, "corpus": "pydoc"},
)
EVAL = Evaluation(
    max_depth=3,
    temperatures=[0.0],
    num_prompts=3,
    prompt_len=12,
    continuation_len=4,
    corpus="pydoc",
    conditions=["default"],
    long_context_len=64,
)


def _train(hf: str, device: str = "cpu", dtype: str = "float32"):
    config = c.TrainDrafterConfig(
        seed=0, device=device, target=c.TargetRef(name="t", hf=hf, dtype=dtype), drafter=DRAFTER
    )
    return run_job("train_drafter", config, {}, num_cpus=1, num_gpus=1 if device == "cuda" else 0)


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory, tiny_target):
    """A tiny Llama saved the way a downloaded model sits on disk."""
    model, tokenizer, _ = tiny_target
    folder = tmp_path_factory.mktemp("hf-llama")
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_drafter_trains_measures_and_profiles_on_a_local_hf_model(hf_folder):
    target = c.TargetRef(name="t", hf=hf_folder, dtype="float32")
    trained = _train(hf_folder)
    assert set(trained.files) == {"config.json", "model.safetensors"}
    assert [s for s, _ in trained.history["train_loss"]] == [1, 2, 3]
    measured = run_job(
        "measure_curve",
        c.MeasureCurveConfig(seed=0, device="cpu", target=target, drafter=DRAFTER, evaluation=EVAL),
        {"drafter": trained},
        num_cpus=1,
        num_gpus=0,
    )
    curve = measured.primary.curve
    assert curve.num_chains == 12 and len(curve.accept_len) == 4
    assert {r.name for r in measured.diagnostics} >= {"rms", "sink_attn", "recent_attn", "draft_attn", "attn_entropy"}
    cost = run_job(
        "profile_cost",
        c.ProfileCostConfig(
            seed=0,
            device="cpu",
            target=target,
            drafter=DRAFTER,
            cost=CostTiming(context_len=8, warmup=0, repeats=2),
            max_depth=3,
            prompts=TimedPrompts.of(EVAL),
            num_cpus=1,
            num_gpus=0,
        ),
        {"drafter": trained},
        num_cpus=1,
        num_gpus=0,
    )
    assert cost.cost.draft_ms > 0


def test_missing_local_model_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no model at"):
        _train(str(tmp_path / "nope"))


def test_gpu_job_without_cuda_refuses_to_fall_back(hf_folder):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(RuntimeError, match="num_gpus=1"):
        _train(hf_folder, device="cuda", dtype="auto")


def test_corrupt_drafter_checkpoint_names_the_file(tiny_target, tiny_drafters, tmp_path):
    from pipeline.core.files import write_dir
    from workers.drafters.eagle3.checkpoint import load_eagle3

    embedding = tiny_target[0].get_input_embeddings().weight
    _, files = tiny_drafters["pre"]

    def load(name, changed):
        folder = write_dir({**files, **changed}, tmp_path / name)
        return load_eagle3(folder, embedding=embedding, device="cpu", dtype=torch.float32)

    with pytest.raises(RuntimeError, match="model.safetensors"):
        load("cut", {"model.safetensors": files["model.safetensors"][:100]})
    with pytest.raises(RuntimeError, match="config.json"):
        load("json", {"config.json": b"{not json"})
    import json

    cfg = json.loads(files["config.json"])
    with pytest.raises(RuntimeError, match="do not match"):
        load("wrong", {"config.json": json.dumps({**cfg, "fc_norm": not cfg["fc_norm"]}).encode()})
    with pytest.raises(RuntimeError, match="the target's embedding is"):
        load_eagle3(write_dir(files, tmp_path / "ok"), embedding=embedding[:-1], device="cpu", dtype=torch.float32)


def test_a_drafter_checkpoint_holds_what_training_changed_in_the_dtype_it_runs_in(tiny_target, tiny_drafters, tmp_path):
    """No copy of the target's frozen embedding; weights in the dtype the drafter runs in (bf16 on CUDA);
    loaded back with the target's embedding it drafts exactly as before."""
    import safetensors.torch

    from pipeline.core.files import write_dir
    from workers.drafters.eagle3.checkpoint import load_eagle3, save_eagle3

    target = tiny_target[0]
    drafter, files = tiny_drafters["post"]
    state = safetensors.torch.load(files["model.safetensors"])
    assert "embed.weight" not in state and {v.dtype for v in state.values() if v.is_floating_point()} == {torch.float32}
    half = save_eagle3(drafter, torch.bfloat16)
    stored = safetensors.torch.load(half["model.safetensors"])
    assert {v.dtype for v in stored.values() if v.is_floating_point()} == {torch.bfloat16}
    assert stored["d2t"].dtype == drafter.d2t.dtype  # the vocabulary map stays integer
    full = sum(v.numel() * v.element_size() for v in drafter.state_dict().values())
    assert len(half["model.safetensors"]) < 0.5 * full  # half the bytes, less the embedding
    back = load_eagle3(
        write_dir(files, tmp_path / "f32"),
        embedding=target.get_input_embeddings().weight,
        device="cpu",
        dtype=torch.float32,
    )
    for name, value in drafter.state_dict().items():
        assert torch.equal(back.state_dict()[name], value), name
    halved = load_eagle3(
        write_dir(half, tmp_path / "bf16"),
        embedding=target.get_input_embeddings().weight,
        device="cpu",
        dtype=torch.bfloat16,
    )
    for name, value in drafter.state_dict().items():  # what a bf16 worker runs: the weights, rounded once
        assert torch.equal(halved.state_dict()[name], value.to(halved.state_dict()[name].dtype)), name


def test_standalone_drafter_from_a_local_hf_folder(hf_folder):
    """The classic pairing with a downloaded draft model: here the same tiny Llama as the target."""
    config = c.MeasureCurveConfig(
        seed=0,
        device="cpu",
        target=c.TargetRef(name="t", hf=hf_folder, dtype="float32"),
        drafter=StandaloneDrafterSpec(name="s", kind="standalone", hf=hf_folder),
        evaluation=EVAL.model_copy(update={"num_prompts": 2}),
    )
    curve = run_job("measure_curve", config, {}, num_cpus=1, num_gpus=0).primary.curve
    assert curve.accept_len[-1] == 4.0  # a draft model identical to the target accepts every draft


def test_greedy_drafts_at_temperature_keep_only_the_targets_mass_on_them(hf_folder):
    """A draft model identical to the target: drafts sampled from q = p are always kept at T = 1;
    its argmax drafts, verified one-hot (vLLM's default), are kept only with probability p(argmax)."""

    def curve(draft_sampling):
        evaluation = EVAL.model_copy(update={"num_prompts": 2, "temperatures": [1.0], "draft_sampling": draft_sampling})
        config = c.MeasureCurveConfig(
            seed=0,
            device="cpu",
            target=c.TargetRef(name="t", hf=hf_folder, dtype="float32"),
            drafter=StandaloneDrafterSpec(name="s", kind="standalone", hf=hf_folder),
            evaluation=evaluation,
        )
        return run_job("measure_curve", config, {}, num_cpus=1, num_gpus=0).primary.curve

    sampled, greedy = curve("sampled"), curve("greedy")
    assert sampled.accept_len[-1] == pytest.approx(4.0, abs=1e-4)
    assert 0.0 < greedy.survival[0] < 0.95 and greedy.accept_len[-1] < 3.5
