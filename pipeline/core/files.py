"""Folders written atomically and hashed by content.

A job's files are a Hugging Face style folder (config.json, model.safetensors, tokenizer files),
held in memory as `Files` ({relative file name: bytes}) only inside one process; between nodes
they travel by reference (pipeline/core/artifacts.py). Wherever a folder lands (a checkpoint
store, a node's cache), it is written into a temporary sibling and renamed into place: a reader
sees the whole folder or none of it, and writers racing on one name (several workers of a node)
cannot mix files.

Damaged checkpoints: a stored result records the sha256 of its files; a later run re-hashes the
folder and runs the job again when anything differs (a truncated, changed, missing or extra
file), rewriting the folder. The temporary sibling is named `.NAME.part-HOST-PID-...` and synced
to disk before the rename; what a killed writer left behind is removed at the next run's start.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from db.owners import owner_gone

Files = dict[str, bytes]


def pack_dir(folder: str | Path) -> Files:
    """Every file under `folder`, by its path relative to it."""
    root = Path(folder)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def files_hash(files: Files) -> str:
    """The content hash of a folder given as bytes: over every file's name and sha256."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()


def dir_hash(folder: str | Path) -> str:
    """files_hash of a folder on disk, read file by file in blocks (a folder of states can be
    hundreds of megabytes): equal to files_hash(pack_dir(folder))."""
    root = Path(folder)
    h = hashlib.sha256()
    for path in sorted((p for p in root.rglob("*") if p.is_file()), key=lambda p: p.relative_to(root).as_posix()):
        one = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                one.update(block)
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + one.digest())
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
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}{PART}{writer_tag()}-"))
    try:
        yield tmp
        _sync_tree(tmp)  # the bytes are on disk before the name says the folder is whole
        try:
            tmp.rename(folder)
        except OSError:
            if not folder.is_dir():  # not a lost race: a real failure
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


PART = ".part-"  # in the name of a folder being written: .NAME.part-HOST-PID-RANDOM


def writer_tag() -> str:
    """HOST-PID of this process, in the name of what it is writing (clean_partials reads it back)."""
    return f"{socket.gethostname()}-{os.getpid()}"


def _sync_tree(root: Path) -> None:
    for path in [*root.rglob("*"), root]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def clean_partials(root: str | Path) -> list[Path]:
    """Remove the half-written folders that writers on this host left in `root` when they died
    (their process is gone); a live writer's, or another host's, are left alone. Returns them."""
    removed = []
    for path in Path(root).glob(f".*{PART}*") if Path(root).is_dir() else ():
        owner = path.name.split(PART, 1)[1]  # HOST-PID-RANDOM
        host, _, pid = owner.rsplit("-", 1)[0].rpartition("-")
        if owner_gone(f"{host}:{pid}"):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def write_dir(files: Files, folder: str | Path, digest: str | None = None) -> Path:
    """Write `files` as `folder`, atomically. A folder already there is kept when it holds the
    same content (`digest`: files_hash(files), when the caller has it) and replaced otherwise:
    a checkpoint damaged on disk is rewritten, never trusted."""
    folder = Path(folder)
    if folder.is_dir() and (digest is None or dir_hash(folder) == digest):
        return folder
    if folder.is_dir():
        stale = folder.with_name(f".{folder.name}{PART}{writer_tag()}-stale")
        folder.rename(stale)
        shutil.rmtree(stale, ignore_errors=True)
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
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}{PART}{writer_tag()}-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
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
    """The folder of `files` (bytes a caller holds) in a node-local cache, for from_pretrained. It is
    named by the content and written whole or not at all, so a folder already there is used as it
    is (not re-hashed on every load)."""
    root = Path(root or cache_root())
    clean_partials(root)
    return write_dir(files, root / files_hash(files)[:32])
