"""The checkpoint store's rules on one machine: what is local, credentials, publishing once, checking."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipeline.core import artifacts
from pipeline.core.artifacts import is_local, local_path, materialise, present, publish, resolved_root, scratch
from pipeline.core.files import PART, dir_hash, write_dir


def test_local_stores_are_paths_and_file_uris():
    assert is_local("/data/ckpt") and is_local("relative/dir") and is_local("file:///data/ckpt")
    assert is_local("C:\\ckpt") and is_local("D:/ckpt")
    assert not any(is_local(u) for u in ("s3://b/p", "gs://b/p", "http://h:5000/x", "mlflow-artifacts:/1/r", "x:y"))
    assert local_path("file:///data/my%20ckpt") == local_path("/data/my ckpt")


def test_a_reference_carries_no_credentials_and_a_server_uri_needs_its_server():
    assert resolved_root("https://me:secret@mlflow.example:5000/store", None) == "https://mlflow.example:5000/store"
    resolved = resolved_root("mlflow-artifacts:/1/abc/artifacts/checkpoints", "http://me:pw@127.0.0.1:5000")
    assert resolved == "http://127.0.0.1:5000/api/2.0/mlflow-artifacts/artifacts/1/abc/artifacts/checkpoints"
    with pytest.raises(ValueError, match="needs the MLflow server"):
        resolved_root("mlflow-artifacts:/1/abc", "sqlite:///mlflow.db")


def _folder(tmp_path, name: str, blob: bytes):
    return write_dir({"config.json": b"{}", "model.safetensors": blob}, tmp_path / "made" / name)


def test_publishing_to_a_folder_moves_once_keeps_the_same_and_replaces_what_differs(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECFLEET_CACHE", str(tmp_path / "cache"))
    store = tmp_path / "store"
    first = publish(_folder(tmp_path, "a", b"one"), str(store), "job1")
    assert first.uri == str((store / "job1").resolve()) and first.sizes == {"config.json": 2, "model.safetensors": 3}
    assert dir_hash(first.uri) == first.sha256 and not (tmp_path / "made" / "a").exists()  # consumed
    again = publish(_folder(tmp_path, "b", b"one"), str(store), "job1")
    assert again == first and not (tmp_path / "made" / "b").exists()
    (store / "job1" / "model.safetensors").write_bytes(b"rot")  # damaged: replaced, not trusted
    fixed = publish(_folder(tmp_path, "c", b"one"), str(store), "job1")
    assert dir_hash(fixed.uri) == first.sha256
    assert not [p for p in store.iterdir() if PART in p.name]


def test_a_writer_that_loses_the_race_reports_what_is_there(tmp_path):
    dest = tmp_path / "store" / "job"
    assert artifacts._move_into(_folder(tmp_path, "a", b"first"), dest)
    assert not artifacts._move_into(_folder(tmp_path, "b", b"second"), dest)
    assert (dest / "model.safetensors").read_bytes() == b"first"


def test_materialising_checks_the_content_and_names_what_is_missing(tmp_path):
    ref = publish(_folder(tmp_path, "a", b"weights"), str(tmp_path / "store"), "job")
    assert materialise(ref.uri, ref.sha256) == local_path(ref.uri)
    assert present(ref.uri, ref.sha256, ref.sizes)
    (local_path(ref.uri) / "model.safetensors").write_bytes(b"weightz")
    assert not present(ref.uri, ref.sha256, ref.sizes)
    with pytest.raises(RuntimeError, match="differ from what was recorded"):
        materialise(ref.uri, ref.sha256)
    with pytest.raises(FileNotFoundError, match="no such folder .* --checkpoints"):
        materialise(str(tmp_path / "gone"), ref.sha256)
    with pytest.raises(ValueError, match="needs its content hash"):
        materialise("s3://bucket/ckpt", None)


def test_an_unreachable_store_is_an_error_not_an_absence(monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    with pytest.raises(RuntimeError, match="cannot list checkpoint http://127.0.0.1:9/"):
        present("http://127.0.0.1:9/api/2.0/mlflow-artifacts/artifacts/ckpt/abc", "0" * 64, {"config.json": 2})


def test_a_dead_workers_scratch_folder_is_removed_and_a_live_ones_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECFLEET_CACHE", str(tmp_path / "cache"))
    mine = scratch()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = mine.parent / mine.name.replace(f"-{os.getpid()}-", f"-{int(dead.stdout)}-")
    left.mkdir()
    (left / "model.safetensors").write_bytes(b"half")
    other = scratch()
    assert mine.is_dir() and other.is_dir() and not left.exists()
