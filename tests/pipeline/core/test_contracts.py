"""The result contracts read what older runs stored, and keep each curve's data together."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from pipeline.core.contracts import Measured, MeasuredCurve
from pipeline.core.types import Curve


def _curve(condition: str) -> Curve:
    return Curve(
        condition=condition,
        temperature=0.0,
        num_chains=4,
        cond_accept=(0.5, 0.25),
        survival=(0.5, 0.125),
        accept_len=(1.0, 1.5, 1.625),
    )


def test_a_result_stored_as_parallel_tuples_reads_as_one_record_per_curve():
    a, b = _curve("default"), _curve("no_bos")
    old = json.loads(
        json.dumps(
            {  # what measure_curve stored before curves were records
                "curves": [a.__dict__, b.__dict__],
                "per_prompt": [[[4, 2.5]], [[4, 1.0]]],
                "walks": [[[[3, 3], [5, 3], [6, 3]]], []],
                "rank_paths": [[[[0, 1]]], [[[2]]]],
                "rank_topk": 4,
                "categories": ["code"],
            },
            default=list,
        )
    )
    measured = Measured.model_validate(old)
    assert [m.curve.condition for m in measured.curves] == ["default", "no_bos"]
    assert measured.primary.per_prompt == ((4, 2.5),) and measured.curves[1].per_prompt == ((4, 1.0),)
    assert measured.primary.walks == (((3, 3), (5, 3), (6, 3)),) and measured.curves[1].walks == ()
    assert measured.curves[1].rank_paths == (((2,),),) and measured.rank_topk == 4
    # and what it writes now reads back unchanged
    assert Measured.model_validate_json(measured.model_dump_json()) == measured


def test_old_parallel_tuples_of_different_lengths_are_refused():
    old = {"curves": [_curve("default").__dict__], "per_prompt": [[], []], "walks": [[]]}
    with pytest.raises(ValidationError):
        Measured.model_validate(old)


def test_without_ranks_a_curve_has_none():
    measured = Measured(curves=(MeasuredCurve(curve=_curve("default"), per_prompt=(), walks=()),))
    assert measured.primary.rank_paths == ()
