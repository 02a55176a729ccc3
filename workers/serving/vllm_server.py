"""vLLM's OpenAI-compatible server as specfleet starts it (`specfleet serve`): a separate process in
vLLM's own environment, bound to 127.0.0.1, its requests and its /metrics page served until it is
stopped, and stopped by its own process group (vLLM starts its engine processes under it).

The server is `python -m vllm.entrypoints.openai.api_server` (the `vllm` console script of the CPU
wheel is broken). A server that does not come up is one VllmError line holding vLLM's own error,
read from its log (for example an invalid per-batch-size schedule, refused only at engine start).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from workers.serving.vllm_engine import VllmError, root_cause


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_argv(
    python: str,
    *,
    model: str,
    served_name: str,
    port: int,
    dtype: str,
    speculative_config: dict | None,
    max_model_len: int | None = None,
    eager: bool = False,
) -> list[str]:
    """The server's command line: on 127.0.0.1 only, the target served under `served_name` (the
    model_name label of its metrics, which `specfleet autotune --from-metrics` reads)."""
    argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--served-model-name", served_name]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--dtype", dtype]
    if speculative_config is not None:
        argv += ["--speculative-config", json.dumps(speculative_config)]
    if max_model_len is not None:
        argv += ["--max-model-len", str(max_model_len)]
    if eager:
        argv.append("--enforce-eager")
    return argv


class ApiServer:
    """One vLLM server process group. `start()` returns once /health answers (or raises VllmError
    with vLLM's error, the group stopped); `stop()` ends the group; a `with` block does both."""

    def __init__(self, argv: list[str], *, port: int, log: Path, env: dict | None = None, timeout_s: float = 900):
        self.argv, self.port, self.log, self.env, self.timeout_s = argv, port, Path(log), env or {}, timeout_s
        self.proc: subprocess.Popen | None = None
        self._stopped = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ApiServer:
        """Start the server and wait for it; whatever ends the wait (a failure, its deadline, Ctrl-C)
        stops what was started before it propagates."""
        if not Path(self.argv[0]).is_file():
            raise VllmError(f"vLLM python {self.argv[0]} does not exist (build one with `make vllm`)")
        with socket.socket() as sock:  # a port something else answers on would pass for ours
            try:
                sock.bind(("127.0.0.1", self.port))
            except OSError as exc:
                raise VllmError(f"port {self.port} on 127.0.0.1 is taken ({exc.strerror}); choose another") from None
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                start_new_session=True,
            )
        try:
            self._wait_until_up()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not (self._healthy() and self.proc.poll() is None):
            if self.proc.poll() is not None:  # start() stops what is left of its group
                cause = root_cause(self.log.read_text(errors="replace")) or f"exit status {self.proc.returncode}"
                raise VllmError(f"vLLM server failed: {cause} (log: {self.log})")
            if time.monotonic() > deadline:
                raise VllmError(f"vLLM server did not come up within {self.timeout_s:g} s (stopped; log: {self.log})")
            time.sleep(1.0)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as answer:
                return answer.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait(self) -> int:
        """Block until the server exits by itself; its exit status."""
        return self.proc.wait()

    def stop(self) -> None:
        """End the server's process group (and nothing else): politely, then what is left by force.
        Once: the group's id may be another's after it is gone."""
        if self.proc is None or self._stopped:
            return
        self._stopped = True
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
