"""The local cluster specfleet starts: on loopback only, with Ray's token authentication, its token
held by the run alone (nothing written to disk), refused to a client without it, and started
although Ray's record of the current cluster is stale (it points at a cluster long gone)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.paths import REPO

AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS")

DRIVER = textwrap.dedent("""
    import json, os, subprocess, sys, time
    import psutil, ray
    from pipeline.run.ray_cluster import connect

    cluster = connect(None, {})
    gcs = ray.get_runtime_context().gcs_address
    time.sleep(3)  # the agents open their ports a moment after the cluster is up
    me = psutil.Process()
    listening = set()
    for proc in [me, *me.children(recursive=True)]:
        try:
            listening |= {c.laddr.ip for c in proc.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}
        except psutil.Error:
            pass
    ok = ray.get(ray.remote(lambda: 42).remote())

    def client(extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
        env.update(RAY_gcs_server_port_wait_time_s="1", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", **extra)
        code = (f"import ray; ray.init(address={gcs!r}, log_to_driver=False); "
                "print(ray.get(ray.remote(lambda: 7).remote()))")
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        return done.returncode, done.stdout.strip()[-20:]

    token = os.environ["RAY_AUTH_TOKEN"]
    result = {"mode": os.environ["RAY_AUTH_MODE"], "token_len": len(token), "listening": sorted(listening), "ok": ok,
              "without": client({"RAY_AUTH_MODE": "token"}), "wrong": client({"RAY_AUTH_MODE": "token",
              "RAY_AUTH_TOKEN": "0" * 64}), "with": client({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token})}
    cluster.close()
    print("RESULT " + json.dumps(result))
""")


@pytest.mark.slow
@pytest.mark.ray
def test_the_local_cluster_is_loopback_only_and_refuses_clients_without_its_token(tmp_path):
    temp = Path(f"/tmp/sfl-{os.getpid()}")  # Ray's temp folder (short: socket paths must fit in 107 characters)
    (temp / "ray").mkdir(parents=True, exist_ok=True)
    (temp / "ray" / "ray_current_cluster").write_text("127.0.0.1:1")  # a stale session's record
    env = {k: v for k, v in os.environ.items() if k not in AUTH_VARS}
    env.update(HOME=str(tmp_path), PYTHONPATH=str(REPO), RAY_TMPDIR=str(temp))
    try:
        done = subprocess.run(
            [sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
        )
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert result["mode"] == "token" and result["token_len"] == 64 and result["ok"] == 42
    assert result["listening"] and set(result["listening"]) <= {"127.0.0.1", "::ffff:127.0.0.1", "::1"}
    assert result["without"][0] != 0 and result["wrong"][0] != 0  # refused
    assert result["with"] == [0, "7"]
    assert not (tmp_path / ".ray" / "auth_token").exists()  # the run's token never touched the disk
