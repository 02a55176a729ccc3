"""Loading models onto a worker: a trained checkpoint, a Hugging Face id or folder, or a GGUF file.

Built-in targets and draft models are Hugging Face folders too, so every causal LM, tiny or
real, goes through `load_model`.
"""

from __future__ import annotations

import copy
import hashlib
import tempfile
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from pipeline.core.artifacts import folder_of
from pipeline.core.contracts import TargetRef, Trained
from pipeline.core.files import Files, cache_root, pack_dir, staged_dir
from pipeline.core.sources import locate, looks_like_path
from workers.models.split import split_map
from workers.runtime.device import pick_dtype


def load_model(
    *,
    folder: str | Path | None = None,
    hf: str | None = None,
    gguf: str | None = None,
    package: str | None = None,
    device: torch.device,
    dtype: torch.dtype,
    role: str = "target",
    split: tuple[int, ...] = (),
):
    """(model, tokenizer) from a trained checkpoint's folder or a model source (`hf`, `gguf`,
    `package`: pipeline/core/sources.py); eval mode, frozen. role names the spec entry in error
    messages. split: GPU indices (more than one) its layers are split over (workers/models/split.py),
    its inputs and outputs on `device`, the first of them."""
    if (folder is None) == (hf is None and gguf is None and package is None):
        raise ValueError("load_model: give exactly one of folder or a model source")
    if folder is not None:
        where = str(folder)
    else:
        try:
            where, gguf_file = locate(hf=hf, gguf=gguf, package=package)
        except LookupError as exc:
            raise FileNotFoundError(f"{role}: {exc}") from None
        if gguf_file is not None:
            where = str(_dequantized(where, gguf_file, role))
    try:
        tokenizer = AutoTokenizer.from_pretrained(where)
        placed = {"device_map": split_map(AutoConfig.from_pretrained(where), split, dtype)} if len(split) > 1 else {}
        model = AutoModelForCausalLM.from_pretrained(where, dtype=dtype, **placed)
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"{role}: cannot load model from {where}: {str(exc).splitlines()[0]}") from exc
    if len(split) <= 1:
        model.to(device)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, tokenizer


def _dequantized(folder: str, name: str, role: str) -> Path:
    """A GGUF file as a float32 safetensors folder in this node's cache, converted once per file.

    transformers dequantizes a GGUF file on every load (12 s for a 135M model on 2 cores); the
    folder loads in a fraction of a second. It is keyed by the file's path, size and mtime, so a
    replaced file is converted again.
    """
    if looks_like_path(folder):
        path = Path(folder).expanduser() / name
    else:  # a hub repository's file: fetched into the hub cache first (or found there offline)
        try:
            from huggingface_hub import hf_hub_download

            path = Path(hf_hub_download(folder, name))
        except Exception as exc:  # offline, unknown repository or file: one line naming both
            raise RuntimeError(
                f"{role}: cannot fetch GGUF file {name} of {folder}: "
                f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            ) from exc
        folder = str(path.parent)
    stat = path.stat()
    key = hashlib.sha256(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:32]
    out = cache_root() / f"gguf-{key}"
    if out.is_dir():
        return out
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise RuntimeError(f"{role}: cannot read GGUF file {path}: {str(exc).splitlines()[0]}") from exc
    config = copy.deepcopy(quantized.config)
    if hasattr(config, "quantization_config"):  # the weights are plain float32 now
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict())
    with staged_dir(out) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
    return out


def load_target(ref: TargetRef, trained: Trained | None, device: torch.device, split: tuple[int, ...] = ()):
    """A pairing's target: the trained built-in one (the job's "target" input) or its model source;
    split over the GPUs `split` when more than one (workers/runtime/device.split_gpus)."""
    dtype = pick_dtype(ref.dtype, device)
    if trained is not None:
        return load_model(folder=folder_of(trained), device=device, dtype=dtype, split=split)
    return load_model(hf=ref.hf, gguf=ref.gguf, package=ref.package, device=device, dtype=dtype, split=split)


def served_folder(ref: TargetRef, trained: Trained | None) -> str:
    """A pairing's target as a serving engine loads it: a model folder, or a hub id the engine fetches
    itself (a trained built-in target's checkpoint; a GGUF file converted once to float32)."""
    if trained is not None:
        return str(folder_of(trained))
    try:
        where, gguf_file = locate(hf=ref.hf, gguf=ref.gguf, package=ref.package)
    except LookupError as exc:
        raise FileNotFoundError(f"target: {exc}") from None
    if gguf_file is not None:
        return str(_dequantized(where, gguf_file, "target"))
    return str(Path(where).expanduser().resolve()) if looks_like_path(where) else where


def load_tokenizer(where: str):
    """The tokenizer of a model folder or hub id."""
    try:
        return AutoTokenizer.from_pretrained(where)
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"target: cannot load the tokenizer from {where}: {str(exc).splitlines()[0]}") from exc


def pack_model(model, tokenizer) -> Files:
    """A model and its tokenizer as a Hugging Face folder, in bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        return pack_dir(tmp)
