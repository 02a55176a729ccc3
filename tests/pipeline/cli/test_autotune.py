"""`specfleet autotune --engine` reads the engine as users spell it, and refuses others in one line."""

from __future__ import annotations

import sys

import pytest

from pipeline.cli import main as cli_main


def _main(monkeypatch, capsys, *argv: str) -> tuple[int, list[str]]:
    monkeypatch.setattr(sys, "argv", ["specfleet", *argv])
    with pytest.raises(SystemExit) as exited:
        cli_main.main()
    return exited.value.code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize(
    "spelling,name",
    [
        ("vLLM", "vllm"),
        ("VLLM", "vllm"),
        ("SGLang", "sglang"),
        ("TensorRT-LLM", "trtllm"),
        ("tensorrt-llm", "trtllm"),
        ("trt-llm", "trtllm"),
        ("hf", "transformers"),
    ],
)
def test_the_engine_is_read_as_users_spell_it(monkeypatch, capsys, tmp_path, spelling, name):
    # a release that is no release number stops it at the engine's own check, which names the engine
    argv = ("autotune", "--engine", spelling, "--engine-version", "v-next", "--workdir", str(tmp_path))
    code, lines = _main(monkeypatch, capsys, *argv)
    assert code == 1 and len(lines) == 1
    assert lines[0].startswith(f"error: --engine-version: {name}: 'v-next' is not a release number"), lines


def test_an_engine_of_no_name_known_is_refused_naming_the_option(monkeypatch, capsys, tmp_path):
    code, lines = _main(monkeypatch, capsys, "autotune", "--engine", "tgi", "--workdir", str(tmp_path))
    assert (code, lines) == (
        1,
        ["error: --engine: unknown engine 'tgi'; use one of vllm, sglang, trtllm, transformers"],
    )
