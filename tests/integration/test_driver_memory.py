"""The driver's memory stays flat as checkpoints grow: a drafter of about 400 MB is trained,
measured and timed on Ray workers while the driver's peak resident memory stays where it is
with a drafter of a few hundred kilobytes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.paths import SUPPORT

from db.store import Store

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.long]  # tests/README.md: markers

TINY = {"layers": 2, "hidden_size": 64, "heads": 4, "intermediate_size": 128}
LARGE = {"layers": 6, "hidden_size": 1024, "heads": 8, "intermediate_size": 4096}  # 101M parameters


def _spec(name: str, drafter: dict) -> dict:
    return {
        "name": name,
        "seed": 0,
        "targets": [
            {
                "name": "t0",
                "builtin": {
                    "layers": 4,
                    "hidden_size": 64,
                    "heads": 4,
                    "intermediate_size": 128,
                    "vocab_size": 400,
                    "train": {"steps": 5, "lr": 0.003, "batch_size": 4, "seq_len": 32},
                },
            }
        ],
        "drafters": [
            {
                "name": "lm",
                "kind": "standalone",
                "builtin": {**drafter, "train": {"steps": 1, "lr": 0.001, "batch_size": 1, "seq_len": 16}},
            }
        ],
        "evaluation": {"max_depth": 1, "num_prompts": 1, "prompt_len": 16, "continuation_len": 2},
        "cost": {
            "context_len": 16,
            "warmup": 1,
            "repeats": 1,
            "batch_sizes": [1],
            "max_batch_size": 1,
            "cost_ratio": 0.1,
        },
    }


def _peak(tmp_path: Path, name: str, drafter: dict) -> tuple[int, int]:
    """(the driver's peak resident bytes, the trained drafter's checkpoint bytes)."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "spec.yaml").write_text(yaml.safe_dump(_spec(name, drafter)))
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, str(SUPPORT / "driver_rss.py"), str(folder / "rss"), "run", "spec.yaml"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    store = Store(f"sqlite:///{folder / '.specfleet' / 'specfleet.db'}")
    try:
        job = next(j for j in store.jobs() if j["kind"] == "train_drafter")
        size = sum(store.finished_result(job["job_hash"])["file_sizes"].values())
    finally:
        store.close()
    return int((folder / "rss").read_text()), size


def test_the_drivers_peak_memory_does_not_grow_with_the_checkpoint(tmp_path):
    small_rss, small_size = _peak(tmp_path, "small", TINY)
    large_rss, large_size = _peak(tmp_path, "large", LARGE)
    grown = large_rss - small_rss
    print(
        f"driver peak RSS {small_rss / 2**20:.0f} MiB with a {small_size / 2**20:.1f} MiB drafter, "
        f"{large_rss / 2**20:.0f} MiB with a {large_size / 2**20:.0f} MiB one ({grown / 2**20:+.0f} MiB)"
    )
    assert large_size > 300 * 2**20 and small_size < 2 * 2**20
    assert grown < 0.1 * large_size
