"""The command's last line of defence: whatever a check where the value entered missed, a refusal
of the store or a path the system refuses reaches the user as one `error:` line, never a traceback."""

from __future__ import annotations

import sys

import pytest
from support.paths import REPO

from db.errors import StoreError
from pipeline.cli import main as cli_main
from pipeline.cli import queries


def _main(monkeypatch, capsys, *argv: str) -> tuple[int, list[str]]:
    monkeypatch.setattr(sys, "argv", ["specfleet", *argv])
    with pytest.raises(SystemExit) as exited:
        cli_main.main()
    return exited.value.code, capsys.readouterr().err.strip().splitlines()


def test_a_store_refusal_is_one_error_line(monkeypatch, capsys, tmp_path):
    def refused(*_args, **_kw):
        raise StoreError("production config qwen/drafter: hardware must be a string of 1..255 characters, got 'x'")

    monkeypatch.setattr(queries, "read_store", refused)
    code, lines = _main(monkeypatch, capsys, "best", "--workdir", str(tmp_path))
    assert code == 1 and lines == [
        "error: production config qwen/drafter: hardware must be a string of 1..255 characters, got 'x'"
    ]


def test_a_path_the_system_refuses_is_one_error_line_naming_it(monkeypatch, capsys, tmp_path):
    def too_long(*_args, **_kw):
        raise OSError(36, "File name too long", "/models/" + "x" * 300)

    monkeypatch.setattr(queries, "read_store", too_long)
    code, lines = _main(monkeypatch, capsys, "best", "--workdir", str(tmp_path))
    assert code == 1 and len(lines) == 1
    assert lines[0].startswith("error: '/models/xxx") and lines[0].endswith("…': File name too long")


def test_an_oserror_without_a_path_is_a_bug_and_keeps_its_traceback(monkeypatch, capsys, tmp_path):
    def broken(*_args, **_kw):
        raise OSError("something inside went wrong")

    monkeypatch.setattr(queries, "read_store", broken)
    monkeypatch.setattr(sys, "argv", ["specfleet", "best", "--workdir", str(tmp_path)])
    with pytest.raises(OSError, match="something inside"):
        cli_main.main()


def test_a_spec_path_too_long_for_the_system(monkeypatch, capsys, tmp_path):
    code, lines = _main(monkeypatch, capsys, "run", str(tmp_path / ("s" * 300 + ".yaml")))
    assert code == 2 and len(lines) == 2 and lines[1] == "(file): cannot read it: File name too long"


@pytest.mark.parametrize("command", [["run", str(REPO / "experiments/quickstart.yaml")], ["best"], ["status"]])
def test_a_work_directory_too_long_for_the_system(monkeypatch, capsys, tmp_path, command):
    workdir = tmp_path / ("w" * 300)
    code, lines = _main(monkeypatch, capsys, *command, "--workdir", str(workdir))
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: --workdir: cannot use '")
    assert lines[0].endswith(": File name too long") and not list(tmp_path.iterdir())  # nothing made
