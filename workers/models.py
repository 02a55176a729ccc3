"""Loading models onto a worker: a trained checkpoint (as bytes) or a Hugging Face id or folder.

Built-in targets and draft models are Hugging Face folders too, so every causal LM, tiny or
real, goes through `load_model`.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pipeline.core.contracts import TargetRef, Trained
from pipeline.core.files import Files, cached_dir, pack_dir
from workers.device import pick_dtype


def load_model(*, files: Files | None = None, hf: str | None = None, device: torch.device, dtype: torch.dtype,
               role: str = "target"):
    """(model, tokenizer) from a packed folder (`files`) or a Hugging Face id or local path (`hf`);
    eval mode, frozen. role names the spec entry in error messages ('target' or 'drafter')."""
    if (files is None) == (hf is None):
        raise ValueError("load_model: give exactly one of files or hf")
    if files is not None:
        where = str(cached_dir(files))
    else:
        where = hf
        if where.startswith(("/", "./", "../", "~")) and not (Path(where).expanduser() / "config.json").is_file():
            raise FileNotFoundError(f"{role}: no model at {where} (config.json not found)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(where)
        model = AutoModelForCausalLM.from_pretrained(where, dtype=dtype)
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"{role}: cannot load model from {where}: {str(exc).splitlines()[0]}") from exc
    model.to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, tokenizer


def load_target(ref: TargetRef, trained: Trained | None, device: torch.device):
    """A pairing's target: the trained built-in one (the job's "target" input) or `ref.hf`."""
    files, hf = (trained.files, None) if trained is not None else (None, ref.hf)
    return load_model(files=files, hf=hf, device=device, dtype=pick_dtype(ref.dtype, device))


def pack_model(model, tokenizer) -> Files:
    """A model and its tokenizer as a Hugging Face folder, in bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        return pack_dir(tmp)
