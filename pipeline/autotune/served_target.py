"""The target of a tuned pairing as a serving engine loads it (`specfleet serve`): the model its
drafter was trained against, found from what the database recorded.

- a given --target-path (a folder, or a hub id the engine fetches itself);
- a target named by hub id or folder: as named;
- a GGUF target (a file or an installed package): converted once to a float32 folder;
- a built-in target: the checkpoint of its train_target job in the experiment that trained the drafter.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.core.contracts import TargetRef, Trained
from pipeline.core.sources import looks_like_path
from pipeline.errors import UserError


def target_folder(store, row: dict, given: str | None) -> str:
    """A folder (or hub id) the engine can load the row's target from; a UserError names what is missing."""
    if given:
        if looks_like_path(given) and not Path(given).expanduser().is_dir():
            raise UserError(f"--target-path: {given} is not a folder on this machine")
        return str(Path(given).expanduser().resolve()) if looks_like_path(given) else given
    job = row.get("drafter_job_hash")
    config = store.job_config(job) if job else None
    if not config or "target" not in config:
        raise UserError(
            f"--target-path: the database records no trained drafter for {row['target']}/{row['drafter']}, "
            "so not its target either; name the target's folder"
        )
    ref = TargetRef.model_validate(config["target"])
    from workers.models.loading import served_folder  # torch and transformers, only here

    trained = None if (ref.hf or ref.gguf or ref.package) else _builtin_checkpoint(store, job, ref.name)
    try:
        return served_folder(ref, trained)
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        raise UserError(f"--target-path: {str(exc).splitlines()[0]}; name the target's folder") from None


def _builtin_checkpoint(store, drafter_job: str, name: str) -> Trained:
    """The trained built-in target of the experiment (newest first) whose jobs include the drafter's."""
    for experiment in sorted(store.experiments(), key=lambda e: (e["created_at"], e["id"]), reverse=True):
        jobs = store.experiment_results(experiment["id"])
        if not any(j["job_hash"] == drafter_job for j in jobs):
            continue
        for j in jobs:
            if j["kind"] == "train_target" and j["name"] == f"train_target {name}":
                return Trained.model_validate(j["result"])
    raise UserError(
        f"--target-path: no finished train_target job for the built-in target {name!r} is recorded beside "
        "its drafter; rerun its experiment or name the target's folder"
    )
