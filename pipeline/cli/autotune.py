"""`specfleet autotune`: a ready engine config for one pairing, from its active tuned config or
from a serving engine's production metrics (stored as a new 'production' version)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli.common import (
    DbOpt,
    WorkdirOpt,
    check_label,
    err,
    in_range,
    open_store,
)
from pipeline.errors import UserError


def autotune(
    engine: Annotated[
        str, typer.Option("--engine", help="vllm | sglang | trtllm | transformers (or vLLM, TensorRT-LLM, hf ...)")
    ],
    engine_version: Annotated[
        str | None,
        typer.Option(
            "--engine-version",
            help="The engine release to write for "
            "(default: vllm 0.33.0, sglang 0.5.23, trtllm 1.2.1, transformers 5.24.0).",
        ),
    ] = None,
    target: Annotated[str | None, typer.Option("--target", help="The pairing's target.")] = None,
    drafter: Annotated[str | None, typer.Option("--drafter", help="The pairing's drafter.")] = None,
    hardware: Annotated[str | None, typer.Option("--hardware", help="Which hardware's tuned config.")] = None,
    condition: Annotated[
        str | None,
        typer.Option(
            "--condition",
            help="Which condition's tuned config (default: the newest active version, so a production re-tune wins).",
        ),
    ] = None,
    drafter_path: Annotated[
        str | None,
        typer.Option("--drafter-path", help="Drafter path for the engine (default: export the trained one)."),
    ] = None,
    export_format: Annotated[
        str,
        typer.Option(
            "--export-format", help="How a trained EAGLE-3 drafter is exported: eagle3 | speculators (vLLM reads both)."
        ),
    ] = "eagle3",
    from_metrics: Annotated[
        list[str] | None, typer.Option("--from-metrics", help="vLLM /metrics file or URL; twice for a window.")
    ] = None,
    model: Annotated[str | None, typer.Option("--model", help="model_name label to read from the metrics.")] = None,
    cost_ratio: Annotated[
        float | None,
        typer.Option("--cost-ratio", help="Drafter/target step-time ratio (default: the stored cost table)."),
    ] = None,
    method: Annotated[
        str | None, typer.Option("--method", help="eagle3 | draft_model (default: the drafter's own).")
    ] = None,
    temperature: Annotated[float, typer.Option("--temperature", help="The deployment's sampling temperature.")] = 0.0,
    workdir: WorkdirOpt = Path(".specfleet"),
    db: DbOpt = None,
):
    """Print a ready engine config for one pairing: from its active tuned config, or from
    production metrics (stored as a new 'production' version)."""
    from pipeline.autotune import tuning as tune
    from pipeline.core.engine_names import canonical_engine
    from pipeline.version import code_version

    engine = canonical_engine(engine)
    if engine not in tune.ENGINES:
        raise UserError(f"--engine: unknown engine {engine!r}; use one of {', '.join(tune.ENGINES)}")
    tune.check_options(engine, engine_version, method, export_format, drafter_path)
    in_range("--temperature", temperature, 0.0, 2.0)
    if cost_ratio is not None:
        in_range("--cost-ratio", cost_ratio, 0.0, 1000.0, low_open=True)
    for option, value in (("--target", target), ("--drafter", drafter), ("--hardware", hardware), ("--model", model)):
        check_label(option, value)
    if from_metrics and drafter is None and drafter_path is not None:
        check_label("--drafter-path", Path(drafter_path).name, "its last part names the drafter; give --drafter NAME")
    counters = tune.read_counters(from_metrics, model) if from_metrics else None  # all read before a write
    store = open_store(workdir, db)
    if from_metrics:
        try:
            name = drafter or (Path(drafter_path).name if drafter_path else None)
            if name is None or drafter_path is None:
                raise UserError("--drafter-path: name the deployed drafter (its path goes into the config)")
            path, method = tune.drafter_path(store, {"target": model, "drafter": name}, workdir, drafter_path, method)
            tune.check_options(engine, engine_version, method, export_format, path)  # before a version is stored
            row, report = tune.from_metrics(
                store,
                counters,
                model_name=model,
                drafter=name,
                cost_ratio=cost_ratio,
                hardware=hardware,
                temperature=temperature,
                code_version=code_version(),
            )
        finally:
            store.close()
        err.print(
            f"stored production version {row['version']} for {row['target']}/{row['drafter']}: "
            f"depth {row['depth']}; {report}",
            markup=False,
            soft_wrap=True,
        )
        if not _speculates(row):
            return
        _print_config(engine, row, path=path, method=method, version=engine_version, workdir=workdir)
        return
    try:
        row, note = tune.pick_version(
            store.best(target=target, drafter=drafter), hardware=hardware, condition=condition
        )
        if note:
            err.print(f"{row['target']}/{row['drafter']}: {note}", markup=False, soft_wrap=True)
        if not _speculates(row):
            return
        path, method = tune.drafter_path(store, row, workdir, drafter_path, method, export_format)
    finally:
        store.close()
    _print_config(engine, row, path=path, method=method, version=engine_version, workdir=workdir)


def _print_config(engine: str, row: dict, *, path: str, method: str, version: str | None, workdir: Path) -> None:
    """The row's config for the engine on stdout (its tree when one is served: never for a
    production version, which has none); what the engine release could not express, and files it
    reads, on stderr."""
    from pipeline.autotune import tuning as tune
    from pipeline.autotune.choice_row import sampling_of, schedule_of, tree_of, unmeasured_note

    emitted = tune.render(
        engine,
        schedule_of(row),
        model=path,
        method=method,
        version=version,
        config_dir=workdir / "engine-configs",
        draft_sampling=sampling_of(row),
        tree=tree_of(row),
    )
    measured = unmeasured_note(row)
    for note in emitted.notes + ((measured,) if measured else ()):
        err.print(f"note: {note}", markup=False, soft_wrap=True)
    sys.stdout.write(emitted.text.rstrip("\n") + "\n")


def _speculates(row: dict) -> bool:
    """False, with a note, when the tuned depth is 0 at every batch size: then there is nothing to
    configure, and the engine's answer is to serve without a drafter (stdout stays empty)."""
    from pipeline.autotune.choice_row import schedule_of, tree_of

    if max(k for _, _, k in schedule_of(row)) > 0 or tree_of(row):  # a tree can pay where no chain does
        return True
    err.print(
        f"{row['target']}/{row['drafter']}: depth 0 at every batch size, speculation does not pay "
        f"on {row.get('hardware') or 'this hardware'}; serve without speculative settings",
        markup=False,
        soft_wrap=True,
    )
    return False
