"""Shared fixtures: one tiny trained target and drafter, a two-node Ray cluster and an empty MLflow
store for the whole session (each costs seconds on CPU)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep every Ray node on loopback

TINY_TARGET = dict(
    layers=4,
    hidden_size=64,
    heads=4,
    intermediate_size=128,
    vocab_size=400,
    corpus="stdlib",
    train=dict(steps=40, lr=3e-3, batch_size=8, seq_len=64),
)
TINY_DRAFT_TRAIN = dict(ttt_depth=2, steps=15, lr=3e-3, batch_size=8, seq_len=64, corpus="stdlib")


def build_tiny_target(**changes):
    """(model, tokenizer, files) of TINY_TARGET with `changes`, trained (and cached by its hash)."""
    import torch

    from pipeline.core.files import cached_dir
    from pipeline.core.model_settings import BuiltinTarget
    from workers.models.loading import load_model
    from workers.models.target import train_builtin_target

    torch.set_num_threads(2)
    files, _ = train_builtin_target(builtin=BuiltinTarget(**{**TINY_TARGET, **changes}), seed=0)
    model, tokenizer = load_model(folder=cached_dir(files), device=torch.device("cpu"), dtype=torch.float32)
    return model, tokenizer, files


def build_tiny_drafter(tiny, norm: str):
    """(drafter, files): a trained EAGLE-3 drafter of `norm` ("pre" or "post") on a tiny target."""
    import torch

    from pipeline.core.files import cached_dir
    from pipeline.core.model_settings import Eagle3DrafterSpec
    from workers.drafters.eagle3.checkpoint import load_eagle3
    from workers.drafters.eagle3.train import train_eagle3

    target, tokenizer, _ = tiny
    spec = Eagle3DrafterSpec(name=norm, norm=norm, fc_norm=norm == "post", fusion="tri", train=TINY_DRAFT_TRAIN)
    files, _ = train_eagle3(target=target, tokenizer=tokenizer, spec=spec, seed=0, device=torch.device("cpu"))
    embedding = target.get_input_embeddings().weight
    return load_eagle3(cached_dir(files), embedding=embedding, device="cpu", dtype=torch.float32), files


def build_tiny_mtp(tiny, recipe: str, norm: str):
    """(head, files): a trained MTP head of `recipe` ("vanilla" or "recursive") and `norm` on a tiny target."""
    import torch

    from pipeline.core.files import cached_dir
    from pipeline.core.model_settings import MtpDrafterSpec
    from workers.drafters.mtp.checkpoint import load_mtp
    from workers.drafters.mtp.train import train_mtp

    target, tokenizer, _ = tiny
    train = {**TINY_DRAFT_TRAIN, "ttt_depth": 1 if recipe == "vanilla" else 3}
    spec = MtpDrafterSpec(name=f"mtp-{recipe}-{norm}", kind="mtp", recipe=recipe, norm=norm, train=train)
    files, _ = train_mtp(target=target, tokenizer=tokenizer, spec=spec, seed=0, device=torch.device("cpu"))
    return load_mtp(cached_dir(files), target=target, device="cpu", dtype=torch.float32), files


def build_tiny_dflash(tiny, layers: int = 2, block_size: int = 5):
    """(drafter, files): a trained DFlash block drafter on a tiny target."""
    import torch

    from pipeline.core.files import cached_dir
    from pipeline.core.model_settings import DFlashDrafterSpec
    from workers.drafters.dflash.checkpoint import load_dflash
    from workers.drafters.dflash.train import train_dflash

    target, tokenizer, _ = tiny
    train = {k: v for k, v in TINY_DRAFT_TRAIN.items() if k != "ttt_depth"} | {"steps": 30, "anchors": 8}
    spec = DFlashDrafterSpec(name="dflash", kind="dflash", layers=layers, block_size=block_size, train=train)
    files, _ = train_dflash(target=target, tokenizer=tokenizer, spec=spec, seed=0, device=torch.device("cpu"))
    return load_dflash(cached_dir(files), target=target, device="cpu", dtype=torch.float32), files


@pytest.fixture(scope="session")
def tiny_dflash(tiny_target):
    """A trained two-layer DFlash drafter of block size 5 on the tiny target."""
    return build_tiny_dflash(tiny_target)


@pytest.fixture(scope="session")
def tiny_target():
    return build_tiny_target()


@pytest.fixture(scope="session")
def tiny_drafters(tiny_target):
    """A trained pre-norm and post-norm drafter on the tiny target."""
    return {norm: build_tiny_drafter(tiny_target, norm) for norm in ("pre", "post")}


@pytest.fixture(scope="session")
def tiny_mtp_heads(tiny_target):
    """Trained MTP heads on the tiny target: vanilla pre-norm, recursive pre-norm and post-norm."""
    return {
        f"{recipe}-{norm}": build_tiny_mtp(tiny_target, recipe, norm)
        for recipe, norm in (("vanilla", "pre"), ("recursive", "pre"), ("recursive", "post"))
    }


@pytest.fixture(scope="session")
def chain_drafters(tiny_drafters, tiny_mtp_heads):
    """Every trained chain drafter on the tiny target, both families: {name: (drafter, files)}."""
    eagle = {f"eagle3-{k}": v for k, v in tiny_drafters.items()}
    return {**eagle, **{f"mtp-{k}": v for k, v in tiny_mtp_heads.items()}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def ray_cluster():
    """A two-node Ray cluster on loopback (ray.cluster_utils), its address; for the whole session."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "gcs_server_port": free_port(),
            "node_ip_address": "127.0.0.1",
            "include_dashboard": False,
        },
    )
    cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes()
    yield cluster.address
    cluster.shutdown()


@pytest.fixture(scope="session")
def mlflow_template(tmp_path_factory) -> Path:
    """An MLflow SQLite store with its tables made (MLflow migrates a new one for over a second)."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


def with_mlflow_store(folder: Path, template: Path) -> Path:
    """`folder` holding a copy of the empty MLflow store as mlflow.db (unless it has one already)."""
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "mlflow.db").exists():
        shutil.copyfile(template, folder / "mlflow.db")
    return folder


@contextmanager
def running_mlflow_server(*store_args: str):
    """An `mlflow server` on loopback with the given store options, its port once it answers."""
    port = free_port()
    server = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("mlflow")),
            "server",
            *store_args,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail("mlflow server did not start within 90 s")
                time.sleep(0.5)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    """A database URL on each real backend: a SQLite file in a folder that does not exist yet (the
    store must create it), and a fresh PostgreSQL database."""
    from support.databases import fresh_pg_database

    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/work/specfleet.db"
    else:
        yield from fresh_pg_database()


@pytest.fixture
def store(db_url: str):
    from db.store import Store

    opened = Store(db_url)
    yield opened
    opened.close()


def pytest_collection_modifyitems(items) -> None:
    """Markers that follow from what a test uses: the session's Ray cluster means `ray`, a
    PostgreSQL database behind a proxy means `postgres`."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "ray_cluster" in fixtures:
            item.add_marker(pytest.mark.ray)
        if "pg_through_proxy" in fixtures:
            item.add_marker(pytest.mark.postgres)
