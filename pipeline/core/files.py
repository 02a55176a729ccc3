"""Model folders as bytes, and the one way a folder is written: atomically.

A checkpoint travels between nodes as `Files`, {relative file name: bytes} of a Hugging Face
style folder (config.json, model.safetensors, tokenizer files), so nodes need no shared
filesystem. Wherever a folder lands (the driver's work directory, a worker's cache), it is
written into a temporary sibling and renamed into place: a reader sees the whole folder or
none of it, and writers racing on one name (several workers of a node) cannot mix files.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

Files = dict[str, bytes]


def pack_dir(folder: str | Path) -> Files:
    """Every file under `folder`, by its path relative to it."""
    root = Path(folder)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def files_hash(files: Files) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()


@contextmanager
def staged_dir(folder: str | Path) -> Iterator[Path]:
    """A temporary sibling of `folder` to fill; it becomes `folder` when the block ends cleanly.

    Callers name folders by content (a job hash, a files hash), so a folder already there holds
    the same bytes: the first writer wins and later ones discard their copy. On an error the
    partial copy is removed and `folder` is untouched.
    """
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.part-"))
    try:
        yield tmp
        try:
            tmp.rename(folder)
        except OSError:
            if not folder.is_dir():  # not a lost race: a real failure
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_dir(files: Files, folder: str | Path) -> Path:
    """Write `files` as `folder`, atomically; a folder already there is kept as it is."""
    folder = Path(folder)
    if folder.is_dir():
        return folder
    with staged_dir(folder) as tmp:
        for name, blob in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_bytes(blob)
    return folder


def write_file(path: str | Path, text: str) -> Path:
    """Write `text` as `path`, atomically (a temporary sibling renamed over it): a reader never
    sees half a file. Files are named by content, so replacing one changes no bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.part-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o644)  # readable by a server that runs as another user (mkstemp makes it 0600)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def cache_root() -> Path:
    """This node's cache of model folders: $SPECFLEET_CACHE, or specfleet-cache in the temp directory."""
    return Path(os.environ.get("SPECFLEET_CACHE", Path(tempfile.gettempdir()) / "specfleet-cache"))


def cached_dir(files: Files, root: str | Path | None = None) -> Path:
    """The folder of `files` in a node-local cache (written once per content), for from_pretrained."""
    return write_dir(files, Path(root or cache_root()) / files_hash(files)[:32])
