"""Whether a Hugging Face hub id can be loaded where a run loads it: found whole in the hub
cache, or fetched from a hub that answers.

The workers see the hub as huggingface_hub sees it in the process that starts them (HF_HOME or
HF_HUB_CACHE, HF_HUB_OFFLINE, HF_ENDPOINT), with the spec's `runtime_env.env_vars` on top: the
variables Ray sets in every worker (`HubAccess.for_workers`). Workers on other machines have
their own caches, which no check here can see. What the cache holds is read with
huggingface_hub's own lookup (`try_to_load_from_cache`), so nothing is fetched; the hub is asked
once, with a short timeout, and only where the cache falls short (`unreachable`).
"""

from __future__ import annotations

import http.client
import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

REACH_TIMEOUT_S = 3.0  # how long validate waits for the hub to answer
_TRUE = ("1", "ON", "YES", "TRUE")  # what huggingface_hub reads as a set flag
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


@dataclass(frozen=True)
class HubAccess:
    """The hub as the run's workers will see it."""

    cache: Path  # the hub cache folder (HF_HUB_CACHE, else HF_HOME/hub)
    offline: bool  # HF_HUB_OFFLINE: nothing is fetched, the cache is all there is
    endpoint: str  # HF_ENDPOINT: the hub asked for what the cache lacks
    timeout_s: float = REACH_TIMEOUT_S

    @classmethod
    def for_workers(cls, env_vars: Mapping[str, str] | None = None) -> HubAccess:
        """huggingface_hub's settings in this process, whose environment the workers inherit, with
        `env_vars` (a spec's runtime_env.env_vars, which Ray sets in each worker) on top. A value
        naming a variable this process does not have is left to the run to refuse."""
        from huggingface_hub import constants

        given = {name: _expanded(value) for name, value in (env_vars or {}).items()}
        given = {name: value for name, value in given.items() if value is not None}
        cache = given.get("HF_HUB_CACHE")
        if cache is None and "HF_HOME" in given and not {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} & set(os.environ):
            cache = os.path.join(given["HF_HOME"], "hub")  # HF_HUB_CACHE, where this process sets it, wins
        offline = constants.HF_HUB_OFFLINE
        if {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"} & set(given):
            offline = any(
                given.get(name, os.environ.get(name, "")).upper() in _TRUE
                for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
            )
        endpoint = given.get("HF_ENDPOINT", constants.ENDPOINT).rstrip("/")
        return cls(cache=Path(cache or constants.HF_HUB_CACHE), offline=offline, endpoint=endpoint)


@dataclass(frozen=True)
class Cached:
    """What the hub cache holds of one hub id, for one load."""

    config: Path | None  # the cached config.json (None: not cached, or a single file was asked for)
    missing: str | None  # why the cache cannot serve the load, said after the hub id; None: it can


def look_up(repo_id: str, cache: Path, file: str | None = None) -> Cached:
    """What `cache` holds of `repo_id` at its main revision: `file` alone (a GGUF file's name), or
    config.json with every weight file it needs. Raises ValueError (huggingface_hub's
    HFValidationError) when `repo_id` cannot be a hub id."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.file_download import repo_folder_name

    wanted = file or "config.json"
    found = try_to_load_from_cache(repo_id, wanted, cache_dir=cache)
    if not isinstance(found, str):  # None, or the cache's note that the hub has no such file
        if not os.path.isdir(cache / repo_folder_name(repo_id=repo_id, repo_type="model")):
            return Cached(None, "is not in the hub cache")
        return Cached(None, f"has no {wanted} in the hub cache")
    if file is not None:
        return Cached(None, None)
    config = Path(found)
    return Cached(config, _weights_missing(config.parent))


def unreachable(access: HubAccess) -> str | None:
    """Why the hub cannot be asked for what the cache lacks, as a phrase; None when it answers
    within access.timeout_s. Any HTTP answer counts (an error status is still the hub answering)."""
    if access.offline:
        return "HF_HUB_OFFLINE is set"
    said: list[str | None] = []
    # in a thread of its own: the timeout of urlopen does not bound the name lookup before it
    asking = threading.Thread(target=lambda: said.append(_ask(access)), daemon=True)
    asking.start()
    asking.join(access.timeout_s)
    return said[0] if said else f"the hub at {access.endpoint} does not answer within {access.timeout_s:g} s"


def _ask(access: HubAccess) -> str | None:
    """One HEAD request to the endpoint: why it got no HTTP answer, or None."""
    try:
        request = urllib.request.Request(access.endpoint, method="HEAD")
        urllib.request.urlopen(request, timeout=access.timeout_s).close()
    except urllib.error.HTTPError:
        return None
    except urllib.error.URLError as exc:
        return f"the hub at {access.endpoint} does not answer ({exc.reason})"
    except (OSError, ValueError, http.client.HTTPException) as exc:  # a timeout, a bad URL, no HTTP
        return f"the hub at {access.endpoint} does not answer ({exc or type(exc).__name__})"
    return None


def _weights_missing(snapshot: Path) -> str | None:
    """What the snapshot folder lacks of the weights its config needs (each file an index names,
    else one weight file), said after the hub id; None when they are all there."""
    for index in WEIGHT_INDEXES:
        if (snapshot / index).is_file():
            try:
                shards = set(json.loads((snapshot / index).read_text(encoding="utf-8"))["weight_map"].values())
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                return f"has an unreadable {index} in the hub cache ({type(exc).__name__})"
            if not all(isinstance(s, str) for s in shards):
                return f"has an unreadable {index} in the hub cache (a weight file name that is no text)"
            shards = sorted(shards)
            absent = [s for s in shards if not (snapshot / s).is_file()]
            if absent:
                return f"lacks {len(absent)} of the {len(shards)} weight files in the hub cache (first {absent[0]})"
            return None
    if any(snapshot.glob("*.safetensors")) or any(snapshot.glob("*.bin")):
        return None
    return "has no weights (.safetensors or .bin) in the hub cache"


def _expanded(value: str) -> str | None:
    """A runtime_env value as the workers get it ($NAME and ${NAME} from this process, ~ the home
    folder); None where a variable it names is not set here."""
    out = os.path.expanduser(os.path.expandvars(value))
    return None if "$" in out else out
