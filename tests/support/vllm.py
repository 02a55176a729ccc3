"""The vLLM environment the real-engine tests use: $SPECFLEET_VLLM_PYTHON, else the `.venv-vllm`
that `make vllm` builds in the checkout. Without one the tests skip, saying so; where one is
required (SPECFLEET_REQUIRE_VLLM=1: CI after building it) they fail instead."""

from __future__ import annotations

import os
from pathlib import Path

from support.paths import REPO


def vllm_python() -> str:
    import pytest

    python = os.environ.get("SPECFLEET_VLLM_PYTHON") or str(REPO / ".venv-vllm" / "bin" / "python")
    if not Path(python).is_file():
        reason = f"no vLLM environment at {python} (`make vllm` builds one; SPECFLEET_VLLM_PYTHON names another)"
        if os.environ.get("SPECFLEET_REQUIRE_VLLM") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return python


def fake_vllm_python(folder: Path, version: str = "0.32.0") -> str:
    """An executable that answers specfleet's release probe (`PYTHON -c "import vllm; ..."`) as a
    vLLM environment of `version` would, for tests of what is planned and stored without vLLM."""
    python = folder / f"fake-vllm-{version}" / "bin" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    python.write_text(f"#!/bin/sh\necho {version}\n")
    python.chmod(0o755)
    return str(python)
