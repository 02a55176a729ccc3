"""The serving engine's checks in `specfleet report` (pipeline/report/served.py and the page section):
the engine's acceptance per position against specfleet's survival interval, the sweep against the
prediction, the printed config's share of the fastest depth, and a refused drafter said in words."""

from __future__ import annotations

from pipeline.core import contracts as c
from pipeline.core.intervals import Band, BatchSpeedup
from pipeline.core.types import Curve
from pipeline.report.data import ExperimentRecord, PairingResults
from pipeline.report.page import experiment_page
from pipeline.report.served import cost_source_table, plot_served, served_acceptance_table, served_speedup_table

CURVE = Curve("template+bos", 0.0, 40, (0.8, 0.6, 0.5), (0.8, 0.48, 0.24), (1.0, 1.8, 2.28, 2.52))
# four prompts of ten chains: survival[1] 0.9/0.7/0.8/0.8, survival[2] 0.6/0.4/0.5/0.42, survival[3] 0.3/0.2/0.2/0.26
ROWS = ((10, 9.0, 6.0, 3.0), (10, 7.0, 4.0, 2.0), (10, 8.0, 5.0, 2.0), (10, 8.0, 4.2, 2.6))
MEASURED = c.Measured(curves=(c.MeasuredCurve(curve=CURVE, per_prompt=ROWS, walks=()),))
SPEEDUPS = [
    BatchSpeedup(1, Band((1.0, 1.5, 1.7, 1.6), (1.0, 1.4, 1.5, 1.4), (1.0, 1.6, 1.9, 1.8)), 2),
    BatchSpeedup(4, Band((1.0, 1.2, 1.1, 0.9), (1.0, 1.1, 1.0, 0.8), (1.0, 1.3, 1.2, 1.0)), 1),
]


def _point(k: int, b: int, speedup: float, per_pos=()) -> c.ServedPoint:
    return c.ServedPoint(
        depth=k,
        batch_size=b,
        tokens_per_s=10.0 * speedup,
        measured_speedup=speedup,
        predicted_speedup=SPEEDUPS[0 if b == 1 else 1].speedup.value[k],
        accept_len=1 + sum(per_pos),
        curve_accept_len=CURVE.accept_len[k],
        accepted_per_pos=tuple(per_pos),
        depth_run=float(k),
        greedy_equal=True,
        seconds=1.0,
        tokens=10,
    )


def _check() -> c.ServingCheck:
    # the engine at k=3 accepts position 2 far less often than specfleet's interval allows
    per_pos = {1: (0.79,), 2: (0.79, 0.2), 3: (0.79, 0.2, 0.24)}
    sweep = [_point(0, b, 1.0) for b in (1, 4)]
    sweep += [_point(k, 1, s, per_pos[k]) for k, s in ((1, 1.3), (2, 1.25), (3, 1.1))]
    sweep += [_point(k, 4, s, per_pos[k]) for k, s in ((1, 1.15), (2, 1.0), (3, 0.8))]
    return c.ServingCheck(
        engine="vllm 0.32.0",
        speculative_config="--speculative-config '{...}'",
        condition="template+bos",
        temperature=0.0,
        hardware="cpu 2t x1 float32",
        cost_hardware="cpu 2t x1 float32",
        sweep=tuple(sweep),
        chosen=(_point(2, 1, 1.24, per_pos[2]), _point(1, 4, 1.15, per_pos[1])),
        best_depth={1: 1, 4: 1},
        chosen_vs_best={1: 1.24 / 1.3, 4: 1.0},
        tolerance=0.05,
        passed=False,
        problems=("batch size 1: the printed config (k=2) reaches 95.4% of k=1",),
    )


def _pairing(served: c.Served, drafter: str = "eagle") -> PairingResults:
    return PairingResults("smol", drafter, measured=MEASURED, served=served)


def test_acceptance_per_position_is_held_against_the_survival_interval():
    table = served_acceptance_table([_pairing(c.Served(serving_check=_check()))])
    engine, ours = table.rows
    assert engine[1] == "vllm 0.32.0, k=3" and engine[2:5] == ("0.790", "0.200", "0.240")
    assert engine[-1] == "2/3 inside"  # position 2 (0.200) lies far below specfleet's 0.480
    assert ours[2].startswith("0.800 [") and ours[3].startswith("0.480 [")


def test_the_sweep_sits_beside_the_prediction_and_the_printed_config_shows_its_share():
    table = served_speedup_table([_pairing(c.Served(serving_check=_check()))], {"smol/eagle": SPEEDUPS})
    rows = {(r[1], r[2]): r for r in table.rows}
    assert rows[("1", "1")][5] == "1.300 (fastest)" and rows[("1", "2")][5] == "1.250"
    assert rows[("1", "2")][3] == "1.700 [1.500, 1.900]"  # the predicted band of batch size 1 at k=2
    assert rows[("4", "1")][3] == "1.200 [1.100, 1.300]"  # batch size 4's own band
    assert rows[("1", "printed (k=2)")][5] == "1.240, 95.4% of the fastest"
    assert rows[("4", "printed (k=1)")][5] == "1.150, 100.0% of the fastest"
    assert rows[("1", "3")][8].startswith("2.520 [")  # specfleet's accept_len with its interval


def test_the_cost_sources_sit_side_by_side_with_what_each_chooses():
    table = cost_source_table([_pairing(c.Served(serving_check=_check()))])
    one, four = table.rows
    assert table.header[-2:] == ("the choice's costs", "this check's clock") and len(one) == len(table.header)
    # k=1 at batch size 1: specfleet 1.8 / 1.5, the engine 1.79 / 1.3
    assert one[:4] == ("smol/eagle", "1", "1.00 / 1.00", "1.20 / 1.38")
    assert one[-2:] == ("k=2: 96.2%", "k=2: 96.2%")  # 2.28 / (1.99 / 1.25) beats 1.8 / (1.79 / 1.3)
    assert four[-2:] == ("k=1: 100.0%", "k=1: 100.0%")


def test_the_page_says_what_was_refused_and_draws_what_was_served(tmp_path):
    served = _pairing(c.Served(serving_check=_check()))
    refused = _pairing(c.Served(serving_check=None, refused="eagle3: no post-norm layer in vLLM"), "post")
    record = ExperimentRecord(1, "e", "h", "v", "now", None, {}, (served, refused), (), ())
    page = experiment_page(record, tmp_path)
    served_part = "\n".join(page.tables).split("Served by the serving engine")[1].split("Drift")[0]
    assert "smol/post: the engine cannot serve this drafter: eagle3: no post-norm layer in vLLM" in "".join(page.parts)
    assert "failed: batch size 1: the printed config (k=2) reaches 95.4% of k=1" in "".join(page.parts)
    assert "Acceptance per draft position" in served_part and "smol/eagle" in served_part
    assert "smol/post" not in served_part  # a refused drafter has no rows
    assert plot_served(served, SPEEDUPS, tmp_path / "x.png").stat().st_size > 10_000
