"""The engine flags a report's summary gives for a pairing's choice: what `specfleet autotune
--engine ENGINE` prints for it at each engine's default release, from the same emitters
(pipeline/autotune/engines/registry.py) and the same reading of the choice (choice_row).

Two things in autotune's output belong to the machine it runs on, and stand as placeholders
here: the drafter's path (autotune exports the trained drafter into its work directory) and
the folder of the files an engine reads beside its flags (SGLang's adaptive steps), whose
content the summary shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.autotune.choice_row import block_drafting_of, choice_row, sampling_of, schedule_of, tree_of
from pipeline.autotune.engines import registry
from pipeline.core.model_settings import SERVED_AS

DRAFTER_PATH = "DRAFTER_PATH"
CONFIG_DIR = "engine-configs"


@dataclass(frozen=True)
class EngineFlags:
    engine: str  # the engine and the release written for: "vllm 0.33.0"
    text: str = ""  # what autotune prints on stdout ("" where the release refuses)
    files: dict[str, str] = field(default_factory=dict)  # path under CONFIG_DIR -> content
    notes: tuple[str, ...] = ()  # what the release could not express, as autotune notes it
    refused: str | None = None  # why this engine cannot serve the choice


def speculates(selected) -> bool:
    """Whether the choice drafts anything at some batch size (a tree can pay where no chain does)."""
    row = choice_row(selected)
    return max(k for _, _, k in schedule_of(row)) > 0 or tree_of(row) is not None


def engine_flags(selected, drafter_kind: str, block_size: int | None = None) -> tuple[EngineFlags, ...]:
    """Every engine's flags for the choice in `selected` (() where no speculation pays: autotune
    prints nothing then). `block_size`: a DFlash drafter's, as its export's folder would say."""
    if not speculates(selected):
        return ()
    row = choice_row(selected)
    out = []
    for engine in registry.ENGINES:
        release = f"{engine} {registry.check_version(engine, None)}"
        try:
            emitted = registry.emit(
                engine,
                schedule_of(row),
                model=DRAFTER_PATH,
                method=SERVED_AS[drafter_kind],
                config_dir=CONFIG_DIR,
                draft_sampling=sampling_of(row),
                tree=tree_of(row),
                block_size=block_size,
                block_drafting=block_drafting_of(row),
            )
        except registry.EngineVersionError as exc:
            # the message names the engine (and release) the summary already names
            out.append(EngineFlags(release, refused=str(exc).removeprefix(f"{release}: ").removeprefix(f"{engine}: ")))
            continue
        files = {f"{CONFIG_DIR}/{name}": text for name, text in emitted.files.items()}
        out.append(EngineFlags(release, emitted.text.rstrip("\n"), files, emitted.notes))
    return tuple(out)
