"""The pieces of `specfleet report` that need no run: intervals by depth and per batch size, the tables,
and the browser check itself (a page with a broken figure and a console error must be caught).
The report of a real run, rendered in Chromium, is tested in test_end_to_end.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.core.choice import batch_speedup, choose_depth
from pipeline.core.intervals import curve_bands, speedup_bands
from pipeline.core.types import CostProfile, Curve

# four prompts, ten chains each: [chains, sum of survival[1], sum of survival[2]]
ROWS = [(10, 9.0, 8.0), (10, 5.0, 2.0), (10, 8.0, 6.0), (10, 3.0, 1.0)]
CURVE = Curve("default", 0.0, 40, (0.625, 0.68), (0.625, 0.425), (1.0, 1.625, 2.05))
COST = CostProfile(
    "gpu",
    0.1,
    1.0,
    1.3,
    batch_sizes=(1, 8, 64),
    draft_ms_by_batch=(0.1, 0.12, 0.3),
    verify_ms_by_batch=((1.0, 1.1, 1.2), (1.2, 1.5, 1.9), (3.0, 5.5, 8.0)),
)


def test_curve_bands_hold_the_pooled_curve_and_are_points_without_prompts():
    survival, accept_len = curve_bands(CURVE, ROWS)
    assert survival.value == CURVE.survival and accept_len.value == CURVE.accept_len
    assert all(lo <= v <= hi for lo, v, hi in zip(survival.lo, survival.value, survival.hi))
    assert accept_len.lo[0] == accept_len.hi[0] == 1.0 and accept_len.hi[2] - accept_len.lo[2] > 0.3
    one = curve_bands(CURVE, ROWS[:1])[1]
    assert one.lo == one.hi == one.value


def test_speedup_bands_cost_batch_one_as_the_choice_did_and_the_rest_from_timed_passes():
    pass_cost = (1.0, 1.25, 1.5)
    choice = choose_depth(CURVE, 0.1, pass_cost=pass_cost, per_prompt=ROWS)
    by_batch = speedup_bands(
        CURVE, per_prompt=ROWS, walks=(), cost=COST, batch1_cost=pass_cost, chosen={1: choice.depth, 8: 1, 64: 0}
    )
    assert [b.batch_size for b in by_batch] == [1, 8, 64] and [b.chosen for b in by_batch] == [choice.depth, 1, 0]
    assert by_batch[0].speedup.value == pytest.approx(choice.speedups)
    assert by_batch[1].speedup.value == pytest.approx(
        batch_speedup(CURVE.accept_len, draft_ms=0.12, verify_ms=(1.2, 1.5, 1.9))
    )
    for b in by_batch:
        band = b.speedup
        assert band.lo[0] == band.hi[0] == 1.0  # no drafting: no uncertainty
        assert all(lo <= v <= hi for lo, v, hi in zip(band.lo, band.value, band.hi)) and band.hi[2] > band.lo[2]


def test_speedup_bands_use_a_decoders_walks_when_the_curve_has_them():
    curve = Curve(
        "default", 0.0, 40, (0.625, 0.68), (0.625, 0.425), (1.0, 1.625, 2.05), decode_accept_len=(1.0, 1.5, 1.75)
    )
    walks = [((4, 4), (6, 4), (7, 4)), ((4, 4), (6, 4), (7, 4))]  # per prompt, [tokens, passes] at k = 0..2
    (b1,) = speedup_bands(
        curve,
        per_prompt=ROWS,
        walks=walks,
        cost=CostProfile("cpu", 0.1, 1.0, 1.2),
        batch1_cost=(1.0, 1.1, 1.2),
        chosen={1: 2},
    )
    assert b1.speedup.value == pytest.approx((1.0, 1.5 / 1.1, 1.75 / 1.2))
    assert b1.speedup.lo == pytest.approx(b1.speedup.hi)  # both prompts walked alike: no spread


def test_tables_escape_html_and_markdown_pipes():
    from pipeline.report.tables import ReportTable as Table

    t = Table("a <b>", ("x|y", "z"), (("<script>", "1|2"),))
    assert "<script>" not in t.html() and "&lt;script&gt;" in t.html()
    assert "x\\|y" in t.markdown() and "1\\|2" in t.markdown()


def test_the_distillation_table_lists_each_round_of_each_stage():
    """Stages of different lengths side by side: a round a stage did not have is a dash, and the
    imitation control (no rollouts) shows dashes for every round."""
    from pipeline.core.contracts import Trained
    from pipeline.report.data import PairingResults
    from pipeline.report.tables import distill_table

    opd = PairingResults(
        "t",
        "opd-s1",
        distilled=Trained(
            metrics={
                "rollout_tokens_per_pass_round0": 1.5,
                "rollout_tokens_per_pass_round1": 1.75,
                "distill_steps": 50,
                "distill_loss": 0.25,
            }
        ),
        distill={"method": "opd", "rounds": 2, "seed": 1},
    )
    control = PairingResults(
        "t",
        "imitation",
        distilled=Trained(metrics={"distill_steps": 75, "distill_loss": 1.5}),
        distill={"method": "imitation", "rounds": 3},
    )
    table = distill_table([opd, control])
    assert table.header == ("pairing", "method", "seed", "steps", "round 0", "round 1", "round 2", "last loss")
    assert table.rows == (
        ("t/opd-s1", "opd", "1", "50", "1.500", "1.750", "-", "0.2500"),
        ("t/imitation", "imitation", "0", "75", "-", "-", "-", "1.5000"),
    )


@pytest.mark.browser
def test_the_browser_check_catches_a_broken_figure_and_a_console_error(tmp_path):
    from support import browser

    browser.need_chromium()
    page = Path(tmp_path / "bad.html")
    page.write_text(
        '<!DOCTYPE html><html><head><title>t</title></head><body><img src="missing.png">'
        '<script>console.error("boom")</script></body></html>'
    )
    rendered = browser.render(page)
    assert rendered.title == "t" and rendered.images[0]["naturalWidth"] == 0
    assert any("boom" in e for e in rendered.errors) and any("ERR_FILE_NOT_FOUND" in e for e in rendered.errors)
