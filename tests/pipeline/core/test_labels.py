"""Labels: free text the database keeps, checked where it enters."""

from __future__ import annotations

import pytest

from db.tables import NAME_LEN
from pipeline.core.labels import LABEL_MAX, label_problem, shown


@pytest.mark.parametrize(
    "value",
    ["cpu 2t x1 float32", "Qwen/Qwen3-8B", "NVIDIA H100 80GB HBM3", "code", "é-ü 中文", "a" * LABEL_MAX],
)
def test_ordinary_labels_pass(value):
    assert label_problem(value) is None


@pytest.mark.parametrize(
    "value,problem",
    [
        ("", "is empty"),
        ("   ", "is empty"),
        ("a" * (LABEL_MAX + 1), f"is {LABEL_MAX + 1} characters long; at most {LABEL_MAX} are stored"),
        ("a\nb", "non-printing character '\\n'"),
        ("a\tb", "non-printing character '\\t'"),
        ("a\x00b", "non-printing character '\\x00'"),
        ("a\u200bb", "non-printing character '\\u200b'"),  # zero-width space
        (None, "must be text, got NoneType"),
        (3, "must be text, got int"),
    ],
)
def test_what_the_store_would_refuse_or_a_table_would_break_on_is_named(value, problem):
    assert problem in label_problem(value)


def test_the_limit_is_the_databases_column():
    assert NAME_LEN == LABEL_MAX


def test_shown_keeps_short_values_and_cuts_long_ones_on_one_line():
    assert shown("abc") == "'abc'"
    assert shown("a\nb") == "'a\\nb'"
    cut = shown("x" * 5000)
    assert len(cut) == 60 and cut.startswith("'xxx") and cut.endswith("…'")
