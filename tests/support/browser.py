"""Open a page in headless Chromium over the DevTools protocol: which images loaded, what the console said.

Used by the report tests; Debian's `chromium` package provides the browser (.ci/run installs it).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Rendered:
    images: list[dict]  # per <img>: src prefix, complete, naturalWidth, naturalHeight
    errors: list[str]  # console errors, uncaught exceptions and failed loads
    title: str


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def render(page: Path, *, timeout_s: float = 60.0) -> Rendered:
    """Load `page` (a local file) and report its images and console errors once it has loaded."""
    import websocket  # websocket-client, a test dependency

    if chromium() is None:
        raise RuntimeError("chromium is not installed (Debian: apt-get install chromium)")

    profile = tempfile.mkdtemp(prefix="specfleet-chromium-")
    proc = subprocess.Popen(
        [
            chromium(),
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--remote-debugging-port=0",
            "--remote-debugging-address=127.0.0.1",
            "--remote-allow-origins=*",
            f"--user-data-dir={profile}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = _devtools_port(proc, timeout_s)
        target = next(
            t
            for t in json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list").read())
            if t["type"] == "page"
        )
        ws = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=timeout_s, suppress_origin=True)
        try:
            return _load(ws, page, timeout_s)
        finally:
            ws.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(profile, ignore_errors=True)


def _devtools_port(proc, timeout_s: float) -> int:
    """The port Chromium prints on stderr when it is ready; its stderr is drained from then on (a full
    pipe would stall it), and a browser that says nothing in time is given up on."""
    found: list[int] = []
    ready = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            match = re.search(r"ws://127\.0\.0\.1:(\d+)/", line)
            if match and not found:
                found.append(int(match.group(1)))
                ready.set()
        ready.set()  # stderr closed: the browser has gone

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(timeout_s) or not found:
        raise RuntimeError(f"chromium did not start in {timeout_s:g} s (exit {proc.poll()})")
    return found[0]


def _load(ws, page: Path, timeout_s: float) -> Rendered:
    ids = itertools.count(1)
    errors: list[str] = []

    def send(method: str, **params) -> dict:
        call = next(ids)
        ws.send(json.dumps({"id": call, "method": method, "params": params}))
        while True:
            message = json.loads(ws.recv())
            _collect(message, errors)
            if message.get("id") == call:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    for domain in ("Page", "Runtime", "Log", "Network"):
        send(f"{domain}.enable")
    send("Page.navigate", url=page.resolve().as_uri())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = json.loads(ws.recv())
        _collect(message, errors)
        if message.get("method") == "Page.loadEventFired":
            break
    else:
        raise RuntimeError(f"{page} did not finish loading in {timeout_s:g} s")
    script = (
        "JSON.stringify({title: document.title, images: Array.from(document.images).map(i => ({src: "
        "i.getAttribute('src').slice(0, 40), complete: i.complete, naturalWidth: i.naturalWidth, "
        "naturalHeight: i.naturalHeight}))})"
    )
    value = json.loads(send("Runtime.evaluate", expression=script, returnByValue=True)["result"]["value"])
    return Rendered(images=value["images"], errors=errors, title=value["title"])


def _collect(message: dict, errors: list[str]) -> None:
    method, params = message.get("method"), message.get("params", {})
    if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
        errors.append("console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
    elif method == "Runtime.exceptionThrown":
        errors.append("exception: " + params["exceptionDetails"].get("text", ""))
    elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
        errors.append("log: " + params["entry"]["text"])
    elif method == "Network.loadingFailed":
        errors.append("load failed: " + params.get("errorText", ""))


def need_chromium() -> None:
    """Skip the calling test when Chromium is not installed, or fail it where a browser is required
    (SPECFLEET_REQUIRE_BROWSER=1: CI)."""
    import pytest

    if chromium() is None:
        if os.environ.get("SPECFLEET_REQUIRE_BROWSER") == "1":
            pytest.fail("chromium is not installed (Debian: apt-get install chromium)")
        pytest.skip("chromium is not installed")
