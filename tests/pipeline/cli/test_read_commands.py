"""Commands that only read stored results never make a database: a work directory without one
(a mistyped --workdir, or no run yet) is one line naming the option, exit 1, nothing created."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

READERS = [["best"], ["speedups"], ["status"], ["drift", "--experiment", "quickstart"], ["report", "quickstart"]]


@pytest.mark.parametrize("command", READERS, ids=[c[0] for c in READERS])
def test_a_read_command_on_a_work_directory_without_a_database_says_so_and_makes_nothing(tmp_path, command):
    from pipeline.cli.common import read_store
    from pipeline.errors import UserError

    missing = tmp_path / "typo"
    with pytest.raises(UserError, match=r"--workdir: .*typo holds no specfleet database \(specfleet.db\)"):
        read_store(missing, None)
    env = {k: v for k, v in os.environ.items() if k not in ("SPECFLEET_DB", "MLFLOW_TRACKING_URI")}
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", *command, "--workdir", str(missing)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"error: --workdir: {missing} holds no specfleet database (specfleet.db); `specfleet run SPEC --workdir "
        f"{missing}` makes one, or name one with --db"
    ]
    assert list(tmp_path.iterdir()) == []  # no work directory, no database, nothing in the current folder


def test_a_named_database_is_read_without_a_work_directory(tmp_path):
    """--db names the store: the work directory then need not hold one."""
    from db.store import Store
    from pipeline.cli.common import read_store

    url = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    Store(url).close()  # a database made by a run elsewhere
    read_store(tmp_path / "no-workdir", url).close()
    assert not (tmp_path / "no-workdir").exists()
