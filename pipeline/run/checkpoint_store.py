"""Which checkpoint store a run's jobs put their files in (pipeline/core/artifacts.py).

The user's `--checkpoints`, checked before anything is written; else, logging to an MLflow
server, its artifact store under the experiment's run; else the work directory's
`checkpoints/` (the embedded default). A folder only this machine has is refused when the
cluster has nodes on other machines.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.core.artifacts import check_writable, is_local, local_path, resolved_root
from pipeline.core.files import clean_partials
from pipeline.errors import UserError
from pipeline.run.tracking import Tracker


def given_store(given: str | None, tracker: Tracker) -> str | None:
    """The store the user named, resolved (None: none named); a bad one is a UserError. Half-written
    folders that dead writers left in a folder store are removed."""
    try:
        root = resolved_root(given, tracker.uri) if given else None
        if root is not None:
            check_writable(root)
    except ValueError as exc:
        raise UserError(f"--checkpoints: {exc}") from None
    if root is not None and is_local(root):
        clean_partials(local_path(root))
    return root


def default_store(tracker: Tracker, parent_run: str, workdir: Path, elsewhere: int) -> str:
    """The store when the user named none: an MLflow server's artifact store (under the experiment's
    run, `checkpoints/`), else the work directory's `checkpoints/`. `elsewhere`: the cluster's nodes
    on other machines, which a server keeping its artifacts in a folder of its own cannot serve.
    Half-written folders that dead writers left in a folder store are removed."""
    root = str((Path(workdir) / "checkpoints").resolve())
    if tracker.is_server():
        try:
            root = resolved_root(f"{tracker.artifact_uri(parent_run).rstrip('/')}/checkpoints", tracker.uri)
        except ValueError as exc:
            raise UserError(f"--mlflow: {exc}") from None
        if is_local(root) and elsewhere:
            raise UserError(unshared(elsewhere, f"the MLflow server's artifact folder {root}"))
    if is_local(root):
        clean_partials(local_path(root))
    return root


def unshared(nodes: int, where: str) -> str:
    return (
        f"--checkpoints: the cluster has {nodes} node(s) on other machines, which cannot read checkpoints in "
        f"{where}: give a store every node reads (an s3:// or gs:// URI, a shared folder) or log to an MLflow "
        "server that serves its artifacts (--mlflow http://...)"
    )
