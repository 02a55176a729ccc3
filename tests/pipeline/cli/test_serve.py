"""`specfleet serve` refuses what it cannot serve in one line, before any server starts: no vLLM
environment, a port out of range, nothing tuned. Serving itself (real vLLM, the production loop) is
tested in tests/integration/test_serve_check_run.py."""

from __future__ import annotations

import sys

import pytest
from support.vllm import fake_vllm_python

from pipeline.cli import main as cli_main


def _main(monkeypatch, capsys, *argv: str) -> tuple[int, list[str], str]:
    monkeypatch.setattr(sys, "argv", ["specfleet", "serve", *argv])
    with pytest.raises(SystemExit) as exited:
        cli_main.main()
    out = capsys.readouterr()
    return exited.value.code, out.err.strip().splitlines(), out.out


def test_a_missing_vllm_environment_is_named(monkeypatch, capsys, tmp_path):
    python = tmp_path / "nowhere" / "bin" / "python"
    code, lines, out = _main(monkeypatch, capsys, "--python", str(python), "--workdir", str(tmp_path / "w"))
    assert (
        code == 1
        and lines == [f"error: --python: vLLM python {python} does not exist (build one with `make vllm`)"]
        and out == ""
    )


def test_a_port_out_of_range_is_refused(monkeypatch, capsys, tmp_path):
    code, lines, _ = _main(monkeypatch, capsys, "--port", "70000", "--workdir", str(tmp_path / "w"))
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: --port") and "70000" in lines[0]


def test_nothing_tuned_says_what_to_run(monkeypatch, capsys, tmp_path):
    python = fake_vllm_python(tmp_path)
    code, lines, out = _main(
        monkeypatch, capsys, "--python", python, "--target", "t0", "--drafter", "d", "--workdir", str(tmp_path / "w")
    )
    assert code == 1 and out == ""
    assert lines == [
        "error: --target/--drafter/--hardware/--condition: no tuned config matches; run `specfleet run SPEC` first"
    ]
