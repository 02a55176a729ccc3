"""Labels fuzzed through `specfleet autotune --from-metrics`, the command that stores labels a user
types (--hardware, --drafter) and a label a server sends (the page's model_name, which names the
target): every label is either stored exactly as given, or refused in one `error:` line that names
where it came from, with nothing stored; never a traceback, never a store's refusal.

The command runs in this process (its `main`, the CLI's last net included), so hundreds of
labels take seconds; tests/pipeline/autotune/test_hostile_metrics.py runs the installed command on
chosen cases."""

from __future__ import annotations

import contextlib
import io
import re
import sys
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from support.paths import DATA

from db.store import Store
from pipeline.cli.main import main
from pipeline.core.labels import LABEL_MAX, label_problem

PAGE = (DATA / "vllm_metrics" / "dflash_k7_window.prom").read_text()
CHARS = st.characters(exclude_categories=("Cs",))  # any code point a str can hold in UTF-8
# what str.isprintable() accepts: no control, format, private, unassigned or separator but the space
PRINTABLE = st.characters(exclude_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"), include_characters=" ")
LABEL = st.one_of(
    st.text(PRINTABLE, min_size=1, max_size=40),
    st.text(CHARS, max_size=12),
    st.text(PRINTABLE, min_size=LABEL_MAX - 2, max_size=LABEL_MAX + 2),  # both sides of the limit
    st.sampled_from(['a"b', "a\\b", "a}b", 'x",position="0', "a=b", "-x", "--help", "é" * LABEL_MAX, "\u200b", " "]),
)
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _escaped(label: str) -> str:
    """A label value as the Prometheus text format writes it (backslash, quote and newline escaped)."""
    return label.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _version(row: dict) -> tuple:
    """What tells one stored version from another (an earlier example may have stored the same workload)."""
    return row["target"], row["drafter"], row["hardware"], row["condition"], row["version"]


def _autotune(*argv: str) -> tuple[int, str]:
    """`specfleet autotune ...` through the command's own entry point: (exit code, stderr)."""
    err = io.StringIO()
    with (
        mock.patch.object(sys, "argv", ["specfleet", "autotune", *argv]),
        contextlib.redirect_stderr(err),
        contextlib.redirect_stdout(io.StringIO()),
    ):
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return code, err.getvalue()


@pytest.mark.slow
@FUZZ
@given(hardware=LABEL, drafter=LABEL, model=LABEL)
@example(hardware="H100 SXM", drafter="eagle3 post", model="llama 3.1/8B")  # all three stored
@example(hardware="x" * (LABEL_MAX + 1), drafter="d", model="m")
@example(hardware="h", drafter="d", model="a\nb")
@example(hardware=" H100 ", drafter=" d", model="m ")  # kept as given: no label is trimmed
def test_a_label_is_stored_as_given_or_refused_in_one_line(tmp_path_factory, db_url, hardware, drafter, model):
    work = tmp_path_factory.mktemp("autotune")
    folder = work / "drafter"
    folder.mkdir()
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}')
    page = work / "metrics.prom"
    page.write_text(re.sub(r'model_name="[^"]*"', lambda _: f'model_name="{_escaped(model)}"', PAGE))
    with Store(db_url) as store:
        before = store.best(history=True)
    code, stderr = _autotune(
        "--engine=vllm",
        f"--from-metrics={page}",
        f"--drafter-path={folder}",
        "--method=eagle3",
        "--cost-ratio=0.1",
        f"--hardware={hardware}",
        f"--drafter={drafter}",
        f"--db={db_url}",
        f"--workdir={work / 'wd'}",
    )
    with Store(db_url) as store:
        after = store.best(history=True)
    problems = {
        "--hardware": label_problem(hardware),
        "--drafter": label_problem(drafter),
        "model_name label": label_problem(model) if model else "is empty",
    }
    assert "Traceback" not in stderr, stderr
    event("stored" if not any(problems.values()) else "refused")
    if not any(problems.values()):
        assert code == 0, (problems, stderr)
        old = {_version(row) for row in before}
        fresh = [row for row in after if _version(row) not in old]
        if not fresh:  # an earlier example stored these labels from the same page: that version is reused
            assert "reused production version" in stderr, stderr
            fresh = [
                r
                for r in after
                if r["active"] and (r["target"], r["drafter"], r["hardware"]) == (model, drafter, hardware)
            ]
        (new,) = fresh
        assert (new["target"], new["drafter"], new["hardware"]) == (model, drafter, hardware)
        assert new["source"] == "production"
        return
    lines = stderr.strip().splitlines()
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: "), (problems, stderr)
    named = [where for where, problem in problems.items() if problem]
    assert any(where in lines[0] for where in named) or "--model" in lines[0], (named, lines[0])
    assert len(lines[0]) < 400, lines[0]
    assert after == before
