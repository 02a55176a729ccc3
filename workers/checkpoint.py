"""Model folders as bytes, so checkpoints travel through Ray's object store between nodes.

A checkpoint is a dict {relative file name: bytes} of a Hugging Face style folder
(config.json, model.safetensors, tokenizer files). Workers materialise it in a local cache.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

Files = dict[str, bytes]


def pack_dir(folder: str | Path) -> Files:
    root = Path(folder)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def files_hash(files: Files) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()


def materialise(files: Files, cache_root: str | Path | None = None) -> Path:
    """Write the files once under cache_root/<hash>/ and return that folder."""
    root = Path(cache_root or os.environ.get("SPECFLEET_CACHE", Path(tempfile.gettempdir()) / "specfleet-cache"))
    folder = root / files_hash(files)[:24]
    if (folder / ".complete").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for name, blob in files.items():  # workers on one node may write the same folder at once
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
        with os.fdopen(fd, "wb") as out:
            out.write(blob)
        os.replace(tmp, path)  # atomic; writers of one hash write the same bytes, so either may win
    (folder / ".complete").write_text("ok")
    return folder
