"""Where things are, for tests that read files or start scripts: the repository, the tests' data."""

from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent  # helper modules and scripts the tests start
TESTS = SUPPORT.parent
REPO = TESTS.parent
DATA = TESTS / "data"
