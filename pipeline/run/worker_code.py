"""specfleet's own code on Ray's workers: the driver's, whatever folder the command started in.

Ray puts the folder a driver started in first on its workers' import path, so a worker of a
command started from a folder holding other `pipeline`, `workers` or `db` packages (an older
checkout, say) would run those, while the jobs are planned, hashed and recorded by the driver's
code. Shipping the driver's packages (Ray's `py_modules`) is not enough: the started-in folder
still comes first. So every worker, local cluster or joined one, gets the driver's packages as
`py_modules` and imports them as it starts (Ray's `worker_process_setup_hook`), before Ray adds
that folder; once imported, a package stays the one every later import finds.
"""

from __future__ import annotations

import importlib
import os

PACKAGES = ("pipeline", "workers", "db")  # everything a job, its recording and its contracts import


def code_folders() -> list[str]:
    """The folders of specfleet's packages as this process imported them: what its workers run."""
    return [os.path.dirname(importlib.import_module(name).__file__) for name in PACKAGES]


def with_code(runtime_env: dict) -> dict:
    """`runtime_env` (env_vars, pip) plus the driver's code, imported first by every worker."""
    return {**runtime_env, "py_modules": code_folders(), "worker_process_setup_hook": f"{__name__}.import_packages"}


def import_packages() -> None:
    """A worker's first step: specfleet's packages from the folders the driver shipped (first on
    its path now; Ray adds the driver's folder in front only later)."""
    for name in PACKAGES:
        importlib.import_module(name)
