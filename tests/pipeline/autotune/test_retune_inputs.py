"""The digest of a production re-tune's inputs: what the metrics say that matters, and every other
input of the decision, each on its own."""

from __future__ import annotations

from test_prod_metrics import MODEL, exposition

from pipeline.autotune.prod_metrics import parse_counters, window
from pipeline.autotune.retune_inputs import inputs_sha256
from pipeline.core.types import CostProfile

PAGE = exposition(300, 1200, 430, [230, 120, 60, 20])
OFFLINE = {"target": MODEL, "drafter": "d", "hardware": "gpu", "condition": "template+bos", "version": 1}
COST = CostProfile("gpu", 1.0, 4.0, 5.2, batch_sizes=(1, 8), draft_ms_by_batch=(1.0, 1.2))
BASE = dict(
    target=MODEL,
    drafter="d",
    hardware="gpu",
    condition="production",
    temperature=0.0,
    given_cost_ratio=None,
    costed_by=OFFLINE,
    batch_cost=COST,
    code_version="v",
)


def test_a_page_that_differs_only_where_nothing_is_decided_gives_the_same_digest():
    """Other metrics, comments, another engine split of the same totals: the same counters."""
    noisy = (
        '# scraped at 12:00:05\nprocess_cpu_seconds_total 81.5\nvllm:num_requests_running{model_name="m"} 3\n'
        + exposition(300, 1200, 430, [230, 120, 60, 20], engines=("0", "1"))
    )
    assert inputs_sha256(parse_counters(PAGE), **BASE) == inputs_sha256(parse_counters(noisy, MODEL), **BASE)


def test_every_input_changes_the_digest():
    counters = parse_counters(PAGE)
    changed = {
        "target": "other-target",
        "drafter": "other-drafter",
        "hardware": "cpu",
        "condition": "sampled",
        "temperature": 0.7,
        "given_cost_ratio": 0.1,
        "costed_by": {**OFFLINE, "version": 2},  # a newer offline choice, with costs of its own
        "batch_cost": None,  # the cost job's result not (yet) in the database
        "code_version": "w",
    }
    digests = {inputs_sha256(counters, **BASE)}
    for key, value in changed.items():
        digests.add(inputs_sha256(counters, **{**BASE, key: value}))
    before = parse_counters(exposition(100, 400, 150, [70, 45, 25, 10]))
    digests.add(inputs_sha256(window(before, counters), **BASE))  # the window, not the totals since start
    digests.add(inputs_sha256(parse_counters(exposition(300, 1200, 430, [230, 120, 61, 19])), **BASE))
    assert len(digests) == len(changed) + 3
