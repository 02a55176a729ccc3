"""What every engine emitter shares: release parsing and the emitted result."""

from __future__ import annotations

from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from pipeline.core.labels import shown
from pipeline.core.schedule import Range


class EngineVersionError(ValueError):
    """A release that specfleet does not write for, or a setting that release cannot run;
    `option` is the command-line option to change."""

    def __init__(self, message: str, option: str = "--engine-version"):
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class Emitted:
    text: str  # what the user passes to the engine: flags, a JSON argument or a YAML file's text
    files: dict[str, str] = field(default_factory=dict)  # file name -> content the text refers to
    notes: tuple[str, ...] = ()  # what this release could not express, and what was written instead
    tree_written: bool = False  # the text runs the draft tree it was asked for (not the chain instead)


def parse_version(engine: str, text: str, oldest: str) -> Version:
    try:
        v = Version(text)
    except InvalidVersion:
        raise EngineVersionError(f"{engine}: {shown(text)} is not a release number (say {oldest})") from None
    if v < Version(oldest):
        raise EngineVersionError(f"{engine} {text} is older than the oldest release specfleet writes for ({oldest})")
    return v


def unset_sampling(engine: str, draft_sampling: str | None) -> tuple[str, ...]:
    """The note for an engine whose drafting rule at temperature > 0 specfleet does not set."""
    if draft_sampling is None:
        return ()
    rule = (
        "drawn from the drafter's q"
        if draft_sampling == "sampled"
        else "taken as the drafter's argmax and verified one-hot"
    )
    return (
        f"{engine}: the curve assumed drafts {rule} at temperature > 0; this config does not set how the "
        "engine draws them, so its acceptance may differ",
    )


def at_least(v: Version, release: str) -> bool:
    return v >= Version(release)


def constant(schedule: list[Range]) -> bool:
    return len({k for _, _, k in schedule}) == 1


def batch1(
    schedule: list[Range], engine: str, version: Version, why: str, option: str = "--engine-version"
) -> tuple[list[Range], tuple[str, ...]]:
    """The schedule this release can run when it cannot run the given one: the batch-size-1 depth at
    every batch size, with the note that says so. `option`: what to change when even that is not
    possible (a batch-size-1 depth of 0)."""
    k = schedule[0][2]
    if k == 0:
        raise EngineVersionError(
            f"{engine} {version}: {why}, and the batch-size-1 depth is 0: at one depth for "
            "every batch size, speculation would not pay; serve without a drafter",
            option,
        )
    if constant(schedule):
        return [(1, schedule[-1][1], k)], ()
    note = (
        f"{engine} {version}: {why}; written as the batch-size-1 depth {k} at every batch size "
        f"(the schedule was {', '.join(f'{lo}-{hi}: k={d}' for lo, hi, d in schedule)})"
    )
    return [(1, schedule[-1][1], k)], (note,)


def not_written(engine: str, version: Version, tree, why: str) -> tuple[str, ...]:
    """The note for a chosen tree that this release cannot run as chosen: the chain is written instead."""
    from pipeline.core.trees import check_tree, shape
    from pipeline.core.words import counted

    sh = shape(check_tree(tree))
    size = counted(sh.nodes, "draft token")
    return (
        f"{engine} {version}: the chosen tree ({size}, depth {sh.depth}, top-{sh.topk}) is not written: {why}; "
        "written as the chain",
    )


def tree_blocker(engine: str, tree, schedule: list[Range], method: str, draft_model_ok: bool = False) -> str | None:
    """Why no release of an engine runs this tree with this schedule, or None."""
    if method == "dflash":
        return "a DFlash drafter drafts one block, never a tree"
    if method == "draft_model" and not draft_model_ok:
        return f"{engine} drafts trees only with EAGLE drafters"
    if not constant(schedule):
        return f"the depth changes with the batch size, and {engine} runs one tree at every batch size"
    return None


def one_block_depth(
    engine: str,
    version: Version,
    schedule: list[Range],
    tree,
    block_size: int | None,
    rules: dict[str, str],
    block_drafting: str = "trained",
) -> tuple[int, tuple[str, ...]]:
    """(depth, notes) for a DFlash drafter on an engine that drafts a block of depth + 1 at one depth
    for every batch size. `rules`: `since`, the first release that serves DFlash, as `method` (older
    ones are refused); `no_schedule`, why the schedule's batch-size-1 depth is written at every batch
    size; `block`, the setting that sizes the block. A block other than the trained one is noted when
    the curve was measured on whole blocks (`block_drafting` "trained"); measured on blocks of depth
    + 1 ("depth"), it is what the curve measured."""
    if not at_least(version, rules["since"]):
        raise EngineVersionError(
            f"{engine} {version} cannot serve a DFlash drafter ({rules['method']} arrived in {rules['since']}); "
            f"use a newer {engine}"
        )
    no_schedule, block = rules["no_schedule"], rules["block"]
    notes = not_written(engine, version, tree, tree_blocker(engine, tree, schedule, "dflash")) if tree else ()
    if not constant(schedule):
        schedule, fallback = batch1(schedule, engine, version, no_schedule, option="--engine")
        notes += fallback
    depth = schedule[0][2]
    if depth + 1 != block_size and block_drafting != "depth":
        trained = f"its trained block of {block_size}" if block_size else "its trained block (not known here)"
        notes += (
            f"{engine} {version}: the DFlash drafter drafts a block of {block} = {depth + 1} tokens for depth "
            f"{depth}, not {trained}, which the curve was measured with; its acceptance may differ "
            "(`block_drafting: depth` on the drafter measures and chooses it as this engine drafts)",
        )
    return depth, notes
