"""Finished results the store does not have yet: kept on disk until they are recorded.

A job's result reaches the driver once. Before anything is written to MLflow or the database,
it goes into `unrecorded/<job hash>.json` (a result with files holds their reference: the job
stored them itself); the file is removed when the job is recorded. When recording
fails (the database or MLflow was down for longer than the writes wait), the file stays, and
the next run of a spec holding that job records it from there instead of running it again.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from pipeline.core.artifacts import sizes_of
from pipeline.core.contracts import Contract, Stored
from pipeline.core.files import files_hash, write_dir, write_file
from pipeline.core.kinds import kind as job_kind
from pipeline.plan import Job
from pipeline.run.record import intact


class Unrecorded:
    """The `unrecorded/` folder of a work directory; the embedded default's checkpoint store is
    its `checkpoints/`."""

    def __init__(self, workdir: Path):
        self.root = Path(workdir) / "unrecorded"
        self.checkpoints = Path(workdir) / "checkpoints"

    def keep(self, job: Job, result: Contract) -> Contract:
        """Put `result` on disk; return it as it will be recorded. Files that came as bytes (a job
        run in this process by a runner that does not store them) go to `checkpoints/` first."""
        if isinstance(result, Stored) and result.files is not None:
            digest = files_hash(result.files)
            folder = write_dir(result.files, self.checkpoints / job.hash, digest)
            result = result.by_reference(str(folder.resolve()), digest, sizes_of(folder))
        write_file(self._path(job.hash), json.dumps({"kind": job.kind, "result": result.model_dump(mode="json")}))
        return result

    def has(self, job_hash: str) -> bool:
        """Whether a result of this job is kept (not checked: see held)."""
        return self._path(job_hash).is_file()

    def drop(self, job_hash: str) -> None:
        self._path(job_hash).unlink(missing_ok=True)

    def held(self, jobs: list[Job]) -> dict[str, Contract]:
        """The kept results of `jobs`, by job hash. A file that no longer reads as its kind's result
        (another release's shape, a damaged file) or whose checkpoint is gone is removed: that job
        runs again."""
        out = {}
        for job in jobs:
            path = self._path(job.hash)
            if not path.is_file():
                continue
            try:
                saved = json.loads(path.read_text(encoding="utf-8"))
                result = job_kind(job.kind).result.model_validate(saved["result"])
                if saved["kind"] != job.kind:
                    raise ValueError(f"kept as a {saved['kind']} result")
            except (OSError, ValueError, KeyError, TypeError, ValidationError):
                path.unlink(missing_ok=True)
                continue
            if isinstance(result, Stored) and not intact(result):
                path.unlink(missing_ok=True)
                continue
            out[job.hash] = result
        return out

    def _path(self, job_hash: str) -> Path:
        return self.root / f"{job_hash}.json"
