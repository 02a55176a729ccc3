"""The code version that job hashes include: what determines a job's result besides its config."""
from __future__ import annotations

import hashlib
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path

# Source whose change can change a result: all of workers/, plus the math and types it uses.
_ROOT = Path(__file__).resolve().parent.parent
_RESULT_CODE = ("workers", "pipeline/acceptance.py", "pipeline/types.py")
_LIBRARIES = ("torch", "transformers", "tokenizers")


@lru_cache(maxsize=1)
def code_version() -> str:
    """'<package version>+<12 hex digits>' over result-determining source and library versions."""
    h = hashlib.sha256()
    for rel in _RESULT_CODE:
        path = _ROOT / rel
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for f in files:
            h.update(f.relative_to(_ROOT).as_posix().encode() + b"\0" + f.read_bytes())
    h.update(f"python{sys.version_info[0]}.{sys.version_info[1]}".encode())  # the built-in corpora
    for lib in _LIBRARIES:
        h.update(f"{lib}=={_installed(lib)}".encode())
    return f"{_installed('specfleet')}+{h.hexdigest()[:12]}"


def _installed(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "0+unknown"
