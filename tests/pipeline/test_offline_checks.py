"""`specfleet validate` checks what a spec loads without loading it: a drafter used as it is fits
its target's config.json, and a hub id is in the hub cache or the hub answers. No test here
reaches the network: the hub cache is a folder laid out as huggingface_hub lays it out, and the
hub is a closed local port or a local server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from pipeline.cli import main as cli_main

TARGET = {"model_type": "llama", "hidden_size": 64, "vocab_size": 400, "num_hidden_layers": 4}
HEAD = {"model_type": "llama", "hidden_size": 64, "vocab_size": 400, "draft_vocab_size": 96}


def _folder(path: Path, config: dict, weights: dict | None = None) -> Path:
    """A model folder: config.json, and model.safetensors holding `weights` where given."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    if weights is not None:
        save_file(weights, str(path / "model.safetensors"))
    return path


def _cached(home: Path, repo_id: str, files: dict[str, str]) -> Path:
    """`repo_id` in the hub cache under HF_HOME `home`, as huggingface_hub leaves it after a
    download: refs/main naming a snapshot that holds `files`. Returns the snapshot folder."""
    repo = home / "hub" / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    for name, text in files.items():
        (snapshot / name).write_text(text)
    return snapshot


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def hub_server():
    """(endpoint, paths asked): a local stand-in for the hub that answers every request 401."""
    asked: list[str] = []

    class Hub(BaseHTTPRequestHandler):
        def do_HEAD(self):
            asked.append(self.path)
            self.send_response(401)
            self.end_headers()

        def log_message(self, *_args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", asked
    server.shutdown()
    server.server_close()


def _spec(tmp_path: Path, target: str, drafters: list[str], extra: str = "") -> Path:
    lines = ["name: offline", "targets:", f"  - {{name: t, hf: {target}}}", "drafters:"]
    lines += [f"  - {d}" for d in drafters]
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "spec.yaml"
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


def _validate(monkeypatch, capsys, spec: Path, home: Path, endpoint: str, offline: bool = False, command=None):
    """(exit code, stderr lines) of `specfleet validate spec` (or of `command`), with
    huggingface_hub's settings as HF_HOME=home, HF_ENDPOINT=endpoint and HF_HUB_OFFLINE=offline give them."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", offline)
    monkeypatch.setattr(sys, "argv", ["specfleet", *(command or ["validate", str(spec)])])
    with pytest.raises(SystemExit) as exited:
        cli_main.main()
    return exited.value.code, capsys.readouterr().err.strip().splitlines()


def test_a_draft_model_must_have_its_targets_vocabulary(monkeypatch, capsys, tmp_path):
    target = _folder(tmp_path / "target", TARGET)
    draft = _folder(tmp_path / "draft", {"hidden_size": 32, "vocab_size": 400})
    spec = _spec(tmp_path, str(target), [f"{{name: d, kind: standalone, hf: {draft}}}"])
    assert _validate(monkeypatch, capsys, spec, tmp_path / "hf", _closed_port()) == (0, [])
    _folder(draft, {"hidden_size": 32, "vocab_size": 49152})
    code, lines = _validate(monkeypatch, capsys, spec, tmp_path / "hf", _closed_port())
    assert code == 2 and lines[1:] == [
        f"drafters[0].hf: draft model {draft / 'config.json'} has vocab_size 49152, but target 't' has "
        f"vocab_size 400 ({target / 'config.json'}); a draft model must share its target's tokenizer (line 5)"
    ], lines


SPECULATORS = {
    "speculators_model_type": "eagle3",
    "norm_before_residual": False,
    "draft_vocab_size": 96,
    "transformer_layer_config": {"model_type": "llama", "hidden_size": 64, "vocab_size": 400},
}


@pytest.mark.parametrize(
    "head, weights, problem",
    [
        ({**HEAD, "hidden_size": 128}, None, "reads target hidden states 128 wide (hidden_size), but target 't' has "),
        (
            {**SPECULATORS, "target_hidden_size": 4096},
            None,
            "reads target hidden states 4096 wide (target_hidden_size), but target 't' has hidden_size 64 (",
        ),
        pytest.param(
            {**SPECULATORS, "transformer_layer_config": {"model_type": "llama", "hidden_size": 64}},
            None,  # speculators leaves out what equals LlamaConfig's default: a vocabulary of 32000
            "has vocab_size 32000, but target 't' has vocab_size 400 (",
            marks=pytest.mark.slow,  # transformers is imported for LlamaConfig's defaults
        ),
        ({**HEAD, "vocab_size": 128256}, None, "has vocab_size 128256, but target 't' has vocab_size 400 ("),
        (
            {**HEAD, "vocab_size": None, "draft_vocab_size": 500},
            None,
            "drafts 500 tokens (draft_vocab_size), more than target 't''s vocab_size 400 (",
        ),
        (
            HEAD,
            {"t2d": np.zeros(1000, dtype=bool)},
            "has t2d over 1000 target ids, but target 't' has vocab_size 400 (",
        ),
        (
            HEAD,
            {"d2t": np.full(96, 350, dtype=np.int64)},  # draft id 95 -> target id 445
            "maps a draft id to target id 445 (d2t), past target 't''s vocab_size 400 (",
        ),
    ],
    ids=["hidden", "target_hidden_size", "speculators-default-vocab", "vocab", "draft-vocab", "t2d", "d2t"],
)
def test_an_eagle3_head_must_fit_its_targets_config(monkeypatch, capsys, tmp_path, head, weights, problem):
    target = _folder(tmp_path / "target", TARGET)
    fits = {"d2t": np.arange(96, dtype=np.int64), "t2d": np.arange(400) % 4 == 0}  # draft id i -> 2i, 96 of them
    path = _folder(tmp_path / "head", HEAD, fits)
    spec = _spec(tmp_path, str(target), [f"{{name: h, kind: eagle3, path: {path}}}"])
    assert _validate(monkeypatch, capsys, spec, tmp_path / "hf", _closed_port()) == (0, [])
    _folder(path, {k: v for k, v in head.items() if v is not None}, weights)
    code, lines = _validate(monkeypatch, capsys, spec, tmp_path / "hf", _closed_port())
    assert code == 2 and len(lines) == 2 and lines[1].startswith("drafters[0].path: EAGLE-3 head "), lines
    assert problem in lines[1] and str(target / "config.json") in lines[1], lines
    assert str(path / ("config.json" if weights is None else "model.safetensors")) in lines[1], lines


def test_a_cached_hub_id_passes_offline_and_its_config_is_compared(monkeypatch, capsys, tmp_path):
    """A hub id whose config and weights are cached needs no hub (the closed port would refuse
    any request); its cached config.json is what the drafter is held to."""
    snapshot = _cached(tmp_path / "hf", "org/target", {"config.json": json.dumps(TARGET), "model.safetensors": ""})
    draft = _folder(tmp_path / "draft", {"vocab_size": 400})
    spec = _spec(tmp_path, "org/target", [f"{{name: d, kind: standalone, hf: {draft}}}"])
    assert _validate(monkeypatch, capsys, spec, tmp_path / "hf", _closed_port()) == (0, [])
    _folder(draft, {"vocab_size": 401})
    code, lines = _validate(monkeypatch, capsys, spec, tmp_path / "hf", _closed_port())
    assert code == 2 and len(lines) == 2, lines
    assert f"vocab_size 400 ({snapshot / 'config.json'})" in lines[1], lines


def test_a_hub_id_neither_cached_nor_reachable_is_one_line_with_the_fixes(monkeypatch, capsys, tmp_path):
    hub = _closed_port()
    spec = _spec(
        tmp_path,
        "org/target",
        ["{name: h, kind: eagle3, path: org/head}", "{name: d, kind: standalone, hf: org/draft}"],
    )
    code, lines = _validate(monkeypatch, capsys, spec, tmp_path / "hf", hub)
    assert code == 2 and lines[0] == f"{spec}: 3 error(s)", lines
    for line, (field, repo, at) in zip(
        lines[1:],
        [("targets[0].hf", "org/target", 3), ("drafters[0].path", "org/head", 5), ("drafters[1].hf", "org/draft", 6)],
        strict=True,
    ):
        assert line.startswith(
            f"{field}: hub id '{repo}' is not in the hub cache ({tmp_path / 'hf' / 'hub'}) and the hub at {hub} "
            "does not answer ("
        ), line
        assert line.endswith(
            "; give a local folder path, set HF_HOME to where it is cached, or fill the cache "
            f"(hf download {repo}) and set HF_HUB_OFFLINE=1 (line {at})"
        ), line


def test_a_cached_hub_id_missing_a_weight_file_is_not_cached(monkeypatch, capsys, tmp_path):
    index = json.dumps({"weight_map": {"a": "model-1-of-2.safetensors", "b": "model-2-of-2.safetensors"}})
    snapshot = _cached(
        tmp_path / "hf",
        "org/target",
        {"config.json": json.dumps(TARGET), "model.safetensors.index.json": index, "model-1-of-2.safetensors": ""},
    )
    spec = _spec(tmp_path, "org/target", ["{name: h, kind: eagle3}"])
    code, lines = _validate(monkeypatch, capsys, spec, tmp_path / "hf", _closed_port())
    assert code == 2 and len(lines) == 2, lines
    assert lines[1].startswith(
        "targets[0].hf: hub id 'org/target' lacks 1 of the 2 weight files in the hub cache (first "
        "model-2-of-2.safetensors) ("
    ), lines
    (snapshot / "model-2-of-2.safetensors").write_text("")
    assert _validate(monkeypatch, capsys, spec, tmp_path / "hf", _closed_port()) == (0, [])


def test_a_hub_that_answers_passes_and_hf_hub_offline_asks_nothing(monkeypatch, capsys, tmp_path, hub_server):
    endpoint, asked = hub_server
    spec = _spec(tmp_path, "org/target", ["{name: h, kind: eagle3}"])
    assert _validate(monkeypatch, capsys, spec, tmp_path / "hf", endpoint) == (0, [])  # 401 is an answer
    assert len(asked) == 1
    code, lines = _validate(monkeypatch, capsys, spec, tmp_path / "hf", endpoint, offline=True)
    assert code == 2 and len(lines) == 2 and len(asked) == 1, (lines, asked)
    assert lines[1] == (
        f"targets[0].hf: hub id 'org/target' is not in the hub cache ({tmp_path / 'hf' / 'hub'}) and "
        "HF_HUB_OFFLINE is set; give a local folder path, set HF_HOME to where it is cached, or fill the cache "
        "(hf download org/target) where the hub answers (line 3)"
    )


def test_a_hub_whose_name_never_resolves_is_given_up_on_within_the_timeout(monkeypatch):
    """urlopen's timeout does not bound the name lookup before the connection: a resolver that
    hangs (an air-gapped node) must still leave validate quick."""
    from pipeline.core.hub_cache import HubAccess, unreachable

    def hangs(*_args, **_kw):
        time.sleep(5)
        raise socket.gaierror("no answer from the resolver")

    monkeypatch.setattr(socket, "getaddrinfo", hangs)
    started = time.monotonic()
    why = unreachable(HubAccess(Path("/nowhere"), offline=False, endpoint="https://hub.invalid", timeout_s=0.5))
    assert why == "the hub at https://hub.invalid does not answer within 0.5 s"
    assert time.monotonic() - started < 2


def test_the_workers_hub_settings_in_runtime_env_are_the_ones_checked(monkeypatch, capsys, tmp_path, hub_server):
    """runtime_env.env_vars is what Ray sets in every worker: its HF_HOME is the cache they read,
    its HF_HUB_OFFLINE keeps them from a hub that answers this process."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    _cached(tmp_path / "workers", "org/target", {"config.json": json.dumps(TARGET), "model.safetensors": ""})
    monkeypatch.setenv("WORKERS_HF", str(tmp_path / "workers"))
    text = "runtime_env: {env_vars: {HF_HOME: '${WORKERS_HF}'}}\n"
    spec = _spec(tmp_path, "org/target", ["{name: h, kind: eagle3}"], text)
    assert _validate(monkeypatch, capsys, spec, tmp_path / "hf", _closed_port()) == (0, [])
    monkeypatch.setenv("WORKERS_HF", str(tmp_path / "elsewhere"))
    code, lines = _validate(monkeypatch, capsys, spec, tmp_path / "hf", _closed_port())
    assert code == 2 and f"is not in the hub cache ({tmp_path / 'elsewhere' / 'hub'})" in lines[1], lines
    endpoint, asked = hub_server
    spec = _spec(
        tmp_path, "org/target", ["{name: h, kind: eagle3}"], "runtime_env: {env_vars: {HF_HUB_OFFLINE: '1'}}\n"
    )
    code, lines = _validate(monkeypatch, capsys, spec, tmp_path / "hf", endpoint)
    assert code == 2 and "and HF_HUB_OFFLINE is set;" in lines[1] and asked == [], (lines, asked)


def test_a_name_that_is_no_path_and_no_hub_id(monkeypatch, capsys, tmp_path):
    spec = _spec(tmp_path, "'models/my model'", ["{name: h, kind: eagle3}"])
    code, lines = _validate(monkeypatch, capsys, spec, tmp_path / "hf", _closed_port())
    assert code == 2 and len(lines) == 2, lines
    assert lines[1].startswith("targets[0].hf: 'models/my model' is no local path and no hub id ("), lines


def test_validate_reads_hf_home_and_hf_endpoint_from_its_environment(tmp_path):
    """The same checks in a fresh process, configured only by its environment variables."""
    _cached(tmp_path / "hf", "org/target", {"config.json": json.dumps(TARGET), "model.safetensors": ""})
    hub = _closed_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_ENDPOINT=hub)
    specs = {
        "cached": _spec(tmp_path, "org/target", ["{name: h, kind: eagle3}"]),
        "missing": _spec(tmp_path / "other", "org/draft", ["{name: h, kind: eagle3}"]),
    }
    done = {
        name: subprocess.run(
            [sys.executable, "-m", "pipeline", "validate", str(path)], env=env, capture_output=True, text=True
        )
        for name, path in specs.items()
    }
    assert done["cached"].returncode == 0, done["cached"].stderr
    assert done["missing"].returncode == 2, done["missing"].stderr
    assert f"and the hub at {hub} does not answer (" in done["missing"].stderr
    assert "Traceback" not in done["missing"].stderr


def test_run_refuses_what_validate_refuses_before_anything_starts(monkeypatch, capsys, tmp_path):
    """`specfleet run` checks the same before it starts Ray or writes a store, under the hub settings
    its workers get (the spec's runtime_env with --runtime-env on top)."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    spec = _spec(tmp_path, "org/target", ["{name: h, kind: eagle3}"])
    work = tmp_path / "work"
    command = ["run", str(spec), "--workdir", str(work)]
    code, lines = _validate(monkeypatch, capsys, spec, tmp_path / "hf", _closed_port(), command=command)
    assert code == 2 and lines[1].startswith("targets[0].hf: hub id 'org/target' is not in the hub cache"), lines
    assert not work.exists()
    _cached(tmp_path / "workers", "org/target", {"config.json": json.dumps(TARGET), "model.safetensors": ""})
    env = json.dumps({"env_vars": {"HF_HOME": str(tmp_path / "workers")}})
    command = ["run", str(spec), "--workdir", str(work), "--dry-run", "--runtime-env", env]
    code, lines = _validate(monkeypatch, capsys, spec, tmp_path / "hf", _closed_port(), command=command)
    assert code == 0, lines
