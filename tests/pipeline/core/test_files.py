"""Checkpoints carry their content hash: a damaged or missing one is run again, never reused;
folders are written whole or not at all, and what a dead writer left half-written is removed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.core.files import PART, clean_partials, dir_hash, files_hash, pack_dir, staged_dir, write_dir
from tests.pipeline.run.test_executor import answer, env, run, statuses  # noqa: F401 (env is a fixture)

FILES = {"config.json": b'{"a": 1}', "sub/model.safetensors": b"\x00" * 1000 + b"weights"}


def test_a_folder_hash_equals_the_hash_of_its_bytes(tmp_path):
    folder = write_dir(FILES, tmp_path / "m")
    assert dir_hash(folder) == files_hash(pack_dir(folder)) == files_hash(FILES)
    (folder / "sub" / "model.safetensors").write_bytes(b"\x00" * 1000 + b"weightz")
    assert dir_hash(folder) != files_hash(FILES)


def test_a_damaged_folder_is_rewritten_and_a_whole_one_kept(tmp_path):
    digest = files_hash(FILES)
    folder = write_dir(FILES, tmp_path / "m", digest)
    inode = (folder / "config.json").stat().st_ino
    assert write_dir(FILES, folder, digest) == folder and (folder / "config.json").stat().st_ino == inode
    blob = (folder / "sub" / "model.safetensors").read_bytes()
    (folder / "sub" / "model.safetensors").write_bytes(blob[: len(blob) // 2])  # truncated
    write_dir(FILES, folder, digest)
    assert dir_hash(folder) == digest and not list(tmp_path.glob(f".*{PART}*"))


def test_a_failed_write_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError), staged_dir(tmp_path / "m") as tmp:
        (tmp / "half").write_bytes(b"x")
        raise RuntimeError("killed mid-write")
    assert list(tmp_path.iterdir()) == []


def test_leftovers_of_dead_writers_are_cleaned_and_live_ones_kept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = socket.gethostname()
    gone = tmp_path / f".abc{PART}{host}-{int(dead.stdout)}-x1y2"
    live = tmp_path / f".abc{PART}{host}-{os.getpid()}-x1y2"
    other = tmp_path / f".abc{PART}other-host-{int(dead.stdout)}-x1y2"
    half_file = tmp_path / f".notes.txt{PART}{host}-{int(dead.stdout)}-q"
    for folder in (gone, live, other):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"half")
    half_file.write_text("half")
    assert sorted(clean_partials(tmp_path)) == sorted([gone, half_file])
    assert live.is_dir() and other.is_dir()


def _checkpoint(store, name: str) -> Path:
    job = next(j for j in store.jobs() if j["name"] == name)
    return Path(store.finished_result(job["job_hash"])["files_uri"])


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "extra file"])
def test_a_damaged_checkpoint_is_run_again_not_reused(env, damage):  # noqa: F811
    tmp_path, store, _ = env
    plan, _ = run(env, answer)
    folder = _checkpoint(store, "train_drafter t/pre")
    recorded = next(store.finished_result(j["job_hash"]) for j in store.jobs() if j["name"] == "train_drafter t/pre")
    assert recorded["files_sha256"] == dir_hash(folder)
    target = folder / "config.json"
    if damage == "truncate":
        target.write_bytes(target.read_bytes()[:3])
    elif damage == "flip":
        target.write_bytes(target.read_bytes().upper())
    elif damage == "delete":
        target.unlink()
    else:
        (folder / "stray.bin").write_bytes(b"?")
    (tmp_path / "checkpoints" / f".x{PART}{socket.gethostname()}-999999999-ab").mkdir()  # a dead run's leftover
    _, again = run(env, answer)
    assert [plan.by_hash()[h].name for h in again.done] == ["train_drafter t/pre"]
    assert statuses(store)["train_drafter t/pre"] == ("done", 2)
    assert dir_hash(folder) == recorded["files_sha256"]  # rewritten whole
    assert not list((tmp_path / "checkpoints").glob(f".*{PART}*"))
