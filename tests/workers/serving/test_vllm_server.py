"""The server process as specfleet runs it (workers/serving/vllm_server.py), without vLLM: stand-in
executables that come up and answer /health, that fail as vLLM fails (its error in its log), or
that never come up. A server is stopped with every process it started, and nothing else."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from workers.serving.vllm_engine import VllmError
from workers.serving.vllm_server import ApiServer, free_port, server_argv

# a server that forks a child (as vLLM starts its engine core) and answers /health once up
UP = """
import http.server, os, sys, time
port = int(sys.argv[sys.argv.index("--port") + 1])
child = os.fork()
if child == 0:
    open(os.environ["CHILD_PID"], "w").write(str(os.getpid()))
    time.sleep(600)
    os._exit(0)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
time.sleep(1.5)
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""
FAILS = """
import sys, time
time.sleep(0.5)
print("INFO starting engine")
print("ERROR EngineCore failed to start.")
print("pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig")
print("RuntimeError: Engine core initialization failed. See root cause above.")
sys.exit(1)
"""
HANGS = "import time\ntime.sleep(600)\n"


def _python(tmp_path: Path, body: str) -> str:
    """An executable named like a vLLM environment's python that runs `body` whatever it is asked."""
    script = tmp_path / "server.py"
    script.write_text(body)
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    python.chmod(0o755)
    return str(python)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_the_command_line_binds_to_loopback_and_names_the_target():
    argv = server_argv(
        "py", model="/m", served_name="t0", port=8123, dtype="float32", speculative_config={"a": 1}, eager=True
    )
    assert argv[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--served-model-name") + 1] == "t0"
    assert argv[argv.index("--speculative-config") + 1] == '{"a": 1}' and "--enforce-eager" in argv
    assert "--speculative-config" not in server_argv(
        "py", model="/m", served_name="t", port=1, dtype="x", speculative_config=None
    )


def test_a_server_comes_up_and_is_stopped_with_its_children(tmp_path):
    port, pid_file = free_port(), tmp_path / "child.pid"
    argv = server_argv(
        _python(tmp_path, UP), model="m", served_name="t", port=port, dtype="float32", speculative_config=None
    )
    with ApiServer(argv, port=port, log=tmp_path / "log", env={"CHILD_PID": str(pid_file)}, timeout_s=30) as server:
        with urllib.request.urlopen(f"{server.url}/health", timeout=5) as answer:
            assert answer.status == 200
        child = int(pid_file.read_text())
        assert _alive(child) and _alive(server.proc.pid)
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child) and server.proc.returncode is not None


def test_a_failed_start_is_vllms_own_error_in_one_line(tmp_path):
    port = free_port()
    argv = server_argv(
        _python(tmp_path, FAILS), model="m", served_name="t", port=port, dtype="x", speculative_config=None
    )
    with pytest.raises(VllmError) as caught:
        ApiServer(argv, port=port, log=tmp_path / "log", timeout_s=30).start()
    message = str(caught.value)
    assert message.startswith("vLLM server failed: ValidationError: 1 validation error for SpeculativeConfig")
    assert "\n" not in message and str(tmp_path / "log") in message


def test_a_server_that_never_comes_up_is_stopped_at_its_deadline(tmp_path):
    port = free_port()
    argv = server_argv(
        _python(tmp_path, HANGS), model="m", served_name="t", port=port, dtype="x", speculative_config=None
    )
    server = ApiServer(argv, port=port, log=tmp_path / "log", timeout_s=2)
    with pytest.raises(VllmError, match="did not come up within 2 s"):
        server.start()
    assert server.proc.returncode is not None  # ended, not left behind


def test_a_missing_environment_is_named(tmp_path):
    argv = server_argv(
        str(tmp_path / "none" / "python"), model="m", served_name="t", port=1, dtype="x", speculative_config=None
    )
    with pytest.raises(VllmError, match="does not exist"):
        ApiServer(argv, port=1, log=tmp_path / "log").start()


def test_a_port_already_taken_is_refused_before_anything_starts(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = server_argv(
            _python(tmp_path, UP), model="m", served_name="t", port=port, dtype="x", speculative_config=None
        )
        server = ApiServer(argv, port=port, log=tmp_path / "log", timeout_s=30)
        with pytest.raises(VllmError, match=f"port {port} on 127.0.0.1 is taken"):
            server.start()
    assert server.proc is None  # nothing was started


def test_an_interrupted_start_stops_the_server(tmp_path):
    port = free_port()
    argv = server_argv(
        _python(tmp_path, HANGS), model="m", served_name="t", port=port, dtype="x", speculative_config=None
    )
    server = ApiServer(argv, port=port, log=tmp_path / "log", timeout_s=60)

    def interrupt(*_):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.alarm(2)  # Ctrl-C while the model would be loading
    try:
        with pytest.raises(KeyboardInterrupt):
            server.start()
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert server.proc.returncode is not None and not _alive(server.proc.pid)
    server.stop()  # a second stop touches nothing
