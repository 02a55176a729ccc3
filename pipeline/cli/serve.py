"""`specfleet serve`: vLLM's OpenAI-compatible server for one pairing, with exactly the config
`specfleet autotune --engine vllm` prints for its active tuned version, on 127.0.0.1, until stopped.

The production loop: serve, let traffic run, `specfleet autotune --from-metrics URL/metrics` stores a
production version from vLLM's own counters, and serving again serves that version. The target is
served under its name in the database, which is the model_name label its metrics carry.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli.common import DbOpt, WorkdirOpt, check_label, err, in_range, open_store
from pipeline.errors import UserError


def serve(
    target: Annotated[str | None, typer.Option("--target", help="The pairing's target.")] = None,
    drafter: Annotated[str | None, typer.Option("--drafter", help="The pairing's drafter.")] = None,
    hardware: Annotated[str | None, typer.Option("--hardware", help="Which hardware's tuned config.")] = None,
    condition: Annotated[str | None, typer.Option("--condition", help="Which condition's tuned config.")] = None,
    drafter_path: Annotated[
        str | None, typer.Option("--drafter-path", help="Drafter folder (default: export the trained one).")
    ] = None,
    target_path: Annotated[
        str | None, typer.Option("--target-path", help="Target folder or hub id (default: the one trained against).")
    ] = None,
    python: Annotated[
        str | None,
        typer.Option("--python", help="vLLM's Python (default: $SPECFLEET_VLLM_PYTHON, else .venv-vllm/bin/python)."),
    ] = None,
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1 (0: a free one).")] = 8000,
    cpu_threads: Annotated[
        int | None,
        typer.Option("--cpu-threads", help="Serve on vLLM's CPU backend with this many cores (default: all, no GPU)."),
    ] = None,
    kv_cache_gib: Annotated[float, typer.Option("--kv-cache-gib", help="KV cache on the CPU backend, GiB.")] = 2.0,
    max_model_len: Annotated[int | None, typer.Option("--max-model-len", help="vLLM's context limit.")] = None,
    start_timeout_s: Annotated[float, typer.Option("--start-timeout-s", help="Longest the start may take.")] = 900.0,
    workdir: WorkdirOpt = Path(".specfleet"),
    db: DbOpt = None,
):
    """Serve one pairing with vLLM's OpenAI server as its active tuned config says, on 127.0.0.1,
    until Ctrl-C (its /metrics feed `specfleet autotune --from-metrics`)."""
    from pipeline.autotune import tuning as tune
    from pipeline.autotune.choice_row import block_drafting_of, sampling_of, schedule_of, tree_of
    from pipeline.autotune.served_target import target_folder
    from workers.serving.vllm_engine import VllmError, cpu_env, engine_python, speculative_config, vllm_version
    from workers.serving.vllm_server import ApiServer, free_port, server_argv

    for option, value in (("--target", target), ("--drafter", drafter), ("--hardware", hardware)):
        check_label(option, value)
    in_range("--port", port, 0, 65535)
    in_range("--kv-cache-gib", kv_cache_gib, 0.0, 4096.0, low_open=True)
    in_range("--start-timeout-s", start_timeout_s, 0.0, 86400.0, low_open=True)
    if cpu_threads is not None:
        in_range("--cpu-threads", cpu_threads, 1, 4096)
    if max_model_len is not None:
        in_range("--max-model-len", max_model_len, 16, 10_000_000)
    python = engine_python(python)
    try:
        version = vllm_version(python)
    except VllmError as exc:
        raise UserError(f"--python: {exc}") from None
    store = open_store(workdir, db)
    try:
        rows = store.best(target=target, drafter=drafter)
        row, note = tune.pick_version(rows, hardware=hardware, condition=condition)
        if note:
            err.print(f"{row['target']}/{row['drafter']}: {note}", markup=False, soft_wrap=True)
        schedule, tree = schedule_of(row), tree_of(row)
        speculates = max(k for _, _, k in schedule) > 0 or bool(tree)
        path, method = tune.drafter_path(store, row, workdir, drafter_path) if speculates else (None, None)
        model = target_folder(store, row, target_path)
    finally:
        store.close()
    config = None
    if speculates:
        emitted = tune.render(
            "vllm",
            schedule,
            model=path,
            method=method,
            version=version,
            config_dir=workdir / "engine-configs",
            draft_sampling=sampling_of(row),
            block_drafting=block_drafting_of(row),
            tree=tree,
        )
        for line in emitted.notes:
            err.print(f"note: {line}", markup=False, soft_wrap=True)
        config = speculative_config(emitted.text)
    else:
        err.print(f"{row['target']}/{row['drafter']}: depth 0 at every batch size: served without speculation")
    on_cpu = cpu_threads is not None or not _gpu_here()
    threads = cpu_threads or os.cpu_count() or 1
    port = port or free_port()
    argv = server_argv(
        python,
        model=model,
        served_name=row["target"],
        port=port,
        dtype="float32" if on_cpu else "auto",
        speculative_config=config,
        max_model_len=max_model_len,
        eager=on_cpu,
    )
    log = workdir / "serving" / f"vllm-{port}.log"
    server = ApiServer(
        argv, port=port, log=log, env=cpu_env(threads, kv_cache_gib) if on_cpu else {}, timeout_s=start_timeout_s
    )
    err.print(
        f"starting vLLM {version} for {row['target']}/{row['drafter']}: {row['source']} v{row['version']}, "
        f"condition {row['condition']}, depth {row['depth']} (log: {log})",
        markup=False,
        soft_wrap=True,
    )
    for sig in (signal.SIGTERM, signal.SIGHUP):  # a stop request or a closed terminal ends the server too
        signal.signal(sig, lambda *_: sys.exit(0))
    try:
        server.start()  # stopped by itself if the start fails or is interrupted
    except VllmError as exc:
        raise UserError(f"--engine vllm: {exc}") from None
    try:
        err.print(
            f"serving {row['target']} at {server.url}/v1 ({'config ' + emitted.text if config else 'no speculation'}); "
            f"metrics at {server.url}/metrics; Ctrl-C stops it",
            markup=False,
            soft_wrap=True,
        )
        sys.stdout.write(f"{server.url}\n")
        sys.stdout.flush()
        code = server.wait()
        raise UserError(f"--engine vllm: the server stopped by itself (exit status {code}; log: {log})")
    except KeyboardInterrupt:
        err.print("stopping the server")
    finally:
        server.stop()


def _gpu_here() -> bool:
    """Whether this machine shows a CUDA device (the vLLM environment's build then serves on it)."""
    import torch

    return torch.cuda.is_available()
