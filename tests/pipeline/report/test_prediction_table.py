"""The report's prediction-against-measurement table: bias, interval and the factor it comes from."""

from types import SimpleNamespace

from pipeline.core.acceptance import walk_accept_len
from pipeline.core.types import Curve
from pipeline.report import prediction_table as module
from pipeline.report.prediction_table import prediction_table

WALKS = [
    [(24, 24), (24, 15), (24, 12)],
    [(24, 24), (24, 13), (24, 10)],
    [(24, 24), (24, 16), (24, 13)],
    [(24, 24), (24, 14), (24, 11)],
]
TOKENS = tuple(walk_accept_len(WALKS))
COST = (1.0, 1.2, 1.4)


def _pairing(label, engine_accept_len, measured, prompts=8, validated=True, blocks=(), on_curve=False):
    curve = Curve(
        condition="template+bos",
        temperature=0.0,
        num_chains=96,
        cond_accept=(0.6, 0.5),
        survival=(0.6, 0.3),
        accept_len=TOKENS,
        decode_accept_len=TOKENS,
    )
    check = SimpleNamespace(measured_speedup=measured, engine_accept_len=engine_accept_len, chosen_depth=2, tree=None)
    return SimpleNamespace(
        label=label,
        measured=SimpleNamespace(primary=SimpleNamespace(curve=curve, walks=WALKS, per_prompt=())),
        selected=SimpleNamespace(pass_cost=COST, choice=SimpleNamespace(cost_ratio=0.2)),
        validated=SimpleNamespace(speedup_check=check) if validated else None,
        jobs={"select_depth": {"seed": 0}},
        held_out_prompts=prompts,
        validated_on_curve=on_curve,
        profiled=SimpleNamespace(cost=SimpleNamespace(pass_ms_blocks=blocks)),
    )


def test_a_row_per_validated_pairing_with_the_bias_split_into_its_factors():
    # the engine kept the curve's tokens per pass but its passes cost 10% more than the table said
    slow = _pairing("t/slow", TOKENS, tuple(t / c / 1.1 for t, c in zip(TOKENS, COST)))
    # the engine kept 10% fewer tokens per pass at the chosen depth, at the table's cost
    fewer = (1.0, TOKENS[1], TOKENS[2] * 0.9)
    short = _pairing("t/short", fewer, tuple(a / c for a, c in zip(fewer, COST)))
    table = prediction_table([slow, short, _pairing("t/unvalidated", TOKENS, (1, 1, 1), validated=False)])
    rows = {r[0]: r for r in table.rows}
    assert set(rows) == {"t/slow", "t/short"}
    header = table.header
    s, f = dict(zip(header, rows["t/slow"])), dict(zip(header, rows["t/short"]))
    assert s["k"] == "2" and s["bias"] == "-9.1%" and s["from tokens per pass"] == "+0.0%"
    assert s["from pass cost"] == "-9.1%"
    assert f["bias"] == "-10.0%" and f["from tokens per pass"] == "-10.0%" and f["from pass cost"] == "+0.0%"
    assert s["predicted"].startswith(f"{TOKENS[2] / COST[2]:.3f} [")
    assert s["interval for"] == "8 prompts"
    assert "off by more than 5%" in s[""] and "off by more than 5%" in f[""]


def test_a_measurement_within_5_percent_and_inside_the_interval_says_so():
    close = _pairing("t/close", TOKENS, tuple(t / c * 0.98 for t, c in zip(TOKENS, COST)))
    (row,) = prediction_table([close]).rows
    assert row[-1] == "within 5%, covered"
    far = _pairing("t/far", TOKENS, tuple(t / c * 0.5 for t, c in zip(TOKENS, COST)))
    (row,) = prediction_table([far]).rows
    assert row[-1] == "off by more than 5%, outside the interval"


def test_the_interval_holds_how_far_the_profile_saw_its_timing_move():
    """Passes that cost 12% more at validation than the profile said: outside an interval that
    knows only the prompts; covered where the profile's two blocks moved about that much."""
    measured = tuple(t / c / 1.12 for t, c in zip(TOKENS, COST))
    (steady,) = prediction_table([_pairing("t/steady", TOKENS, measured, blocks=((10, 12, 14), (20, 24, 28)))]).rows
    (moving,) = prediction_table([_pairing("t/moving", TOKENS, measured, blocks=((10, 12, 14), (10, 13.5, 15.8)))]).rows
    assert steady[-1] == "off by more than 5%, outside the interval"
    assert moving[-1] == "off by more than 5%, covered"
    assert moving[2] != steady[2] and moving[2].split(" [")[0] == steady[2].split(" [")[0]


def test_no_validated_pairing_gives_no_table():
    assert prediction_table([_pairing("t/x", TOKENS, (1, 1, 1), validated=False)]) is None


def test_a_served_tree_gets_its_own_row_after_the_chains(monkeypatch):
    pairing = _pairing("t/tree", TOKENS, tuple(t / c for t, c in zip(TOKENS, COST)))
    pairing.validated.speedup_check.tree = SimpleNamespace(
        trees=([(0,), (1,), (0, 0)],),
        predicted_speedup=(1.20,),
        measured_speedup=(1.08,),
        decode_accept_len=(2.4,),
        engine_accept_len=(2.4,),
    )
    monkeypatch.setattr(module, "choice_row", lambda selected: {})
    monkeypatch.setattr(module, "tree_of", lambda row: [(0,), (1,), (0, 0)])
    chain, tree = prediction_table([pairing]).rows
    assert chain[0] == "t/tree" and tree[0] == ""
    assert tree[1] == "tree of 3 tokens, depth 2, top-2" and tree[2:6] == ("1.200", "", "1.080", "-10.0%")
    assert tree[6] == "+0.0%" and tree[7] == "-10.0%" and tree[8] == "served; off by more than 5%"
    monkeypatch.setattr(module, "tree_of", lambda row: None)  # the chain is served: no tree row
    assert len(prediction_table([pairing]).rows) == 1


def test_a_check_on_the_curves_own_prompts_says_so_and_predicts_their_text():
    exact = _pairing(
        "t/own",
        tuple(walk_accept_len(WALKS[:2])),
        tuple(a / c for a, c in zip(walk_accept_len(WALKS[:2]), COST)),
        prompts=2,
        on_curve=True,
    )
    (row,) = prediction_table([exact]).rows
    cells = dict(zip(prediction_table([exact]).header, row))
    assert cells["interval for"] == "the curve's first 2 prompts"
    assert cells["bias"] == "+0.0%" and "within 5%, covered" in cells[""]
