"""Shared fixtures: one tiny trained target and drafter for the whole session (seconds on CPU)."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep every Ray node on loopback

TINY_TARGET = dict(layers=4, hidden_size=64, heads=4, intermediate_size=128, vocab_size=400, corpus="stdlib",
                   train=dict(steps=40, lr=3e-3, batch_size=8, seq_len=64))
TINY_DRAFT_TRAIN = dict(ttt_depth=2, steps=15, lr=3e-3, batch_size=8, seq_len=64, corpus="stdlib")


@pytest.fixture(scope="session")
def tiny_target():
    import torch

    from pipeline.core.settings import BuiltinTarget
    from workers.models import load_model
    from workers.target import train_builtin_target

    torch.set_num_threads(2)
    files, _ = train_builtin_target(builtin=BuiltinTarget(**TINY_TARGET), seed=0)
    model, tokenizer = load_model(files=files, device=torch.device("cpu"), dtype=torch.float32)
    return model, tokenizer, files


@pytest.fixture(scope="session")
def tiny_drafters(tiny_target):
    """A trained pre-norm and post-norm drafter on the tiny target."""
    import torch

    from pipeline.core.settings import Eagle3DrafterSpec
    from workers.eagle_checkpoint import load_eagle3
    from workers.eagle_train import train_eagle3

    target, tokenizer, _ = tiny_target
    out = {}
    for norm in ("pre", "post"):
        spec = Eagle3DrafterSpec(name=norm, norm=norm, fc_norm=norm == "post", fusion="tri", train=TINY_DRAFT_TRAIN)
        files, _ = train_eagle3(target=target, tokenizer=tokenizer, spec=spec, seed=0, device=torch.device("cpu"))
        out[norm] = (load_eagle3(files, device="cpu", dtype=torch.float32), files)
    return out
