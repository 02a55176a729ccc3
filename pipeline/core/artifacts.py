"""Where the files of a job's result live, and how a node gets them: by reference.

A job that makes files (a trained model, regenerated text, hidden states) writes them once to
the run's checkpoint store and returns a reference: the folder's URI, its content hash
(`files_hash`) and its files' sizes. Jobs that take the result get the reference, never the
bytes; the driver records it and never reads the files. Two kinds of store:

- a folder (the embedded default: the work directory's `checkpoints/`; or a shared folder a
  cluster's nodes mount): the files are written there once and read in place;
- any URI MLflow writes artifacts to: an `mlflow server`'s artifact proxy (whose
  `mlflow-artifacts:` URIs are resolved to the server's HTTP address, so a reference needs
  nothing else to be read), `s3://`, `gs://`, `abfss://` and the rest. A node downloads a
  folder once into its own cache (`cache_root()`, named by the content hash), checks the hash,
  and every later job on that node reads the copy.

MLflow is imported only for a remote store.

The jobs that make files are train_target, train_drafter, regenerate and target_features; they
store under their job hash. The content hash is a sha256 over every file's name and sha256. A
node's cache is `$SPECFLEET_CACHE` (default: `specfleet-cache` in the temp directory), and the
node that stored a folder keeps its own copy there too. An `mlflow server` proxies artifacts
unless started with `--no-serve-artifacts`; the files then go to its artifact store under the
experiment's run (`checkpoints/<job hash>/<content hash>/`), and the reference is the server's
HTTP address without any user or password the tracking URI carried: a node reads it as
MLflow's client does (MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or
MLFLOW_TRACKING_TOKEN, in the workers' environment when the server asks for them). With
`--checkpoints s3://...` or `gs://...` the driver and every node need that store's client
library and credentials (`pip install boto3` or `google-cloud-storage`).

A store named with `--checkpoints` is written to once before anything runs (a probe file,
removed again where the backend can delete; pipeline/run/checkpoint_store.py): a folder that
cannot be made, a server that does not answer or a missing client library stops the run there,
in one line naming the store. A store that cannot be reached later, when a run starts reusing
results, stops it with an error naming the checkpoint: nothing is rerun or forgotten for it.
Before reusing a result the driver checks that its reference still holds what was recorded: a
folder by its content hash, a remote store by its listing (names and sizes; the node that
downloads it checks the hash).

What a drafter stores is what it trained: an EAGLE drafter's checkpoint leaves out the
target's frozen token embedding (taken from the target when it is loaded, as the engines do;
for an 8B target that is 0.5B of the drafter's 0.9B parameters), and both families store their
weights in the dtype they run in (bfloat16 on CUDA).

Two tests hold this: a two-node Ray cluster whose nodes have their own cache and temporary
directories trains a drafter on one node against a local `mlflow server`, removes that node,
and measures the drafter on the other (which fetches it from the server, checked by hash; the
driver's work directory holds no checkpoint); and a driver that trains a 387 MiB draft model
on Ray workers peaks at the same resident memory as one training a 0.5 MiB one (352 MiB both).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlparse
from urllib.request import url2pathname

from pipeline.core.files import PART, cache_root, cached_dir, clean_partials, dir_hash, staged_dir, writer_tag
from pipeline.core.labels import shown


class Ref(NamedTuple):
    """Where a folder went, its files_hash, and {relative name: bytes} of its files."""

    uri: str
    sha256: str
    sizes: dict[str, int]


def is_local(uri: str) -> bool:
    """A folder on this machine: a plain path (a Windows one too) or a file:// URI."""
    return urlparse(uri).scheme in ("", "file") or re.match(r"^[A-Za-z]:[\\/]", uri) is not None


def local_path(uri: str) -> Path:
    parsed = urlparse(uri)
    return Path(url2pathname(parsed.path) if parsed.scheme == "file" else uri).expanduser()


def resolved_root(uri: str, tracking_uri: str | None) -> str:
    """A store root every node can read without more settings: an MLflow server's proxied
    `mlflow-artifacts:` URI becomes the server's HTTP address; other URIs stay as they are;
    a folder becomes absolute."""
    if is_local(uri):
        return str(local_path(uri).resolve())
    if urlparse(uri).scheme == "mlflow-artifacts":
        from mlflow.store.artifact.mlflow_artifacts_repo import MlflowArtifactsRepository

        if not tracking_uri or urlparse(tracking_uri).scheme not in ("http", "https"):
            raise ValueError(f"{uri} needs the MLflow server it belongs to (an http(s) tracking URI)")
        uri = MlflowArtifactsRepository.resolve_uri(uri, tracking_uri)
    return _without_credentials(uri.rstrip("/"))


def _without_credentials(uri: str) -> str:
    """A URI without the user:password a tracking URI may carry: references are stored and logged,
    and nodes authenticate as MLflow's client does (MLFLOW_TRACKING_USERNAME/PASSWORD/TOKEN)."""
    parsed = urlparse(uri)
    if parsed.username is None and parsed.password is None:
        return uri
    host = parsed.hostname or ""
    return parsed._replace(netloc=f"{host}:{parsed.port}" if parsed.port else host).geturl()


def sizes_of(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


def publish(folder: Path, root: str, name: str) -> Ref:
    """Put a finished folder in the store `root` under `name` (a job hash); `folder` is consumed.

    In a folder store it is moved (or copied, across filesystems) into place atomically, and a
    copy already there with the same content is kept. In a remote store it is uploaded, then
    moved into this node's cache, where the jobs that take it next on this node find it."""
    folder = Path(folder)
    sha, sizes = dir_hash(folder), sizes_of(folder)
    if is_local(root):
        dest = local_path(root) / name
        if dest.is_dir() and dir_hash(dest) == sha:
            shutil.rmtree(folder, ignore_errors=True)
            return Ref(str(dest.resolve()), sha, sizes)
        if dest.is_dir():  # damaged or of another release: replaced, never trusted
            stale = dest.with_name(f".{dest.name}{PART}{writer_tag()}-stale")
            dest.rename(stale)
            shutil.rmtree(stale, ignore_errors=True)
        if not _move_into(folder, dest):  # another attempt of the job put its own there first
            sha, sizes = dir_hash(dest), sizes_of(dest)
        return Ref(str(dest.resolve()), sha, sizes)
    # named by content under the job: two attempts of one job never write into one folder
    uri = f"{root.rstrip('/')}/{name}/{sha[:16]}"
    try:
        _repo(uri).log_artifacts(str(folder))
    except Exception as exc:  # noqa: BLE001 - any backend's failure, named with the store
        raise RuntimeError(f"cannot upload to checkpoint store {uri}: {_first_line(exc)}") from exc
    cached = cache_root() / sha[:32]
    if cached.is_dir() or not _move_into(folder, cached):
        shutil.rmtree(folder, ignore_errors=True)
    return Ref(uri, sha, sizes)


def check_writable(root: str) -> None:
    """A ValueError naming `root` unless a file can be written there: a folder is made if missing and
    a probe file written and removed; a remote store gets a small probe file uploaded (under
    `.specfleet-probe/`, removed where the backend can delete). Run before any work that writes there."""
    name = f".probe-{_host()}-{os.getpid()}"
    made = None  # the outermost folder this check made, removed again when the check fails
    try:
        if is_local(root):
            folder = local_path(root)
            made = _outermost_missing(folder)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text("")
            (folder / name).unlink()
            return
        repo = _repo(f"{root.rstrip('/')}/.specfleet-probe")
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / name).write_text("specfleet checks it can write here\n")
            repo.log_artifact(str(Path(tmp) / name))
    except Exception as exc:  # noqa: BLE001 - any backend's failure, named with the store
        # an OSError's reason without its file name: the root is named already, and may be long
        reason = f"{type(exc).__name__}: {exc.strerror}" if isinstance(exc, OSError) and exc.strerror else None
        where = root if len(root) <= 200 else shown(root, 200)
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        raise ValueError(f"cannot write to {where}: {reason or _first_line(exc)}") from None
    try:
        repo.delete_artifacts(name)
    except Exception:  # noqa: BLE001 - a store that cannot delete keeps a few bytes
        pass


def _outermost_missing(folder: Path) -> Path | None:
    """The first of `folder` and its parents, from the root down, that does not exist yet."""
    for path in (*reversed(folder.parents), folder):
        try:
            if not path.exists():
                return path
        except OSError:  # a name the system refuses does not exist
            return path
    return None


def materialise(uri: str, sha256: str | None) -> Path:
    """The folder of a reference on this node: in place for a folder store (its content checked),
    else this node's cached copy, downloaded and checked the first time. A folder that is gone or
    holds other bytes than were recorded is an error naming it."""
    if is_local(uri):
        folder = local_path(uri)
        if not folder.is_dir():
            raise FileNotFoundError(
                f"checkpoint {folder}: no such folder on {_host()} (a cluster without a "
                "shared folder needs a remote checkpoint store: specfleet run --checkpoints URI)"
            )
        if sha256 is not None and dir_hash(folder) != sha256:
            raise RuntimeError(f"checkpoint {folder}: its files differ from what was recorded (damaged or replaced)")
        return folder
    if sha256 is None:
        raise ValueError(f"checkpoint {uri}: a remote reference needs its content hash")
    cached = cache_root() / sha256[:32]
    if cached.is_dir():  # written whole, after its hash was checked
        return cached
    clean_partials(cached.parent)
    with staged_dir(cached) as tmp:
        try:
            _repo(uri).download_artifacts("", dst_path=str(tmp))
        except Exception as exc:  # noqa: BLE001
            raise RuntimeError(f"cannot download checkpoint {uri}: {_first_line(exc)}") from exc
        if dir_hash(tmp) != sha256:
            raise RuntimeError(f"checkpoint {uri}: downloaded files differ from what was recorded")
    return cached


def folder_of(result) -> Path:
    """The folder of a Stored result on this node: its bytes written to the cache when it holds
    them, else its reference materialised."""
    if result.files is not None:
        return cached_dir(result.files)
    if result.files_uri is None:
        raise ValueError(f"a {type(result).__name__} result without files")
    return materialise(result.files_uri, result.files_sha256)


def present(uri: str, sha256: str | None, sizes: dict[str, int]) -> bool:
    """Whether a reference still holds what was recorded, judged without reading it elsewhere: a
    folder by its content hash, a remote store by its listing (names and sizes; the hash is checked
    by the node that downloads it). A store that cannot be asked is an error, not an absence: what
    it holds is neither rerun nor forgotten while it is away."""
    if is_local(uri):
        folder = local_path(uri)
        return folder.is_dir() and (sha256 is None or dir_hash(folder) == sha256)
    try:
        return _remote_sizes(uri) == sizes
    except Exception as exc:  # noqa: BLE001 - any backend's failure, named with the store
        raise RuntimeError(f"cannot list checkpoint {uri}: {_first_line(exc)}") from exc


def _remote_sizes(uri: str) -> dict[str, int]:
    repo, out, todo = _repo(uri), {}, [None]
    while todo:
        path = todo.pop()
        for info in repo.list_artifacts(path):
            if info.is_dir:
                todo.append(info.path)
            else:
                out[info.path] = info.file_size
    return out


def scratch() -> Path:
    """An empty folder for a job to write its files into, on this node's disk beside its cache; those
    of workers that died before publishing are removed here."""
    root = cache_root() / "scratch"
    root.mkdir(parents=True, exist_ok=True)
    clean_partials(root)
    return Path(tempfile.mkdtemp(dir=root, prefix=f".files{PART}{writer_tag()}-"))


def _move_into(folder: Path, dest: Path) -> bool:
    """Move `folder` to `dest` atomically; whether it is this folder that is there now (False: a
    writer racing on the same name was first, and this one is discarded)."""
    with staged_dir(dest) as tmp:
        tmp.rmdir()
        shutil.move(str(folder), str(tmp))
        mine = tmp.stat().st_ino
    return dest.stat().st_ino == mine


def _repo(uri: str):
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    return get_artifact_repository(uri)


def _host() -> str:
    import socket

    return socket.gethostname()


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {next(iter(str(exc).splitlines()), '')}"
