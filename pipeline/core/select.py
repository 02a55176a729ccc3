"""The select_depth job: the depth for the primary curve from its measured acceptance and costs.

The primary curve is the spec's first condition at its first temperature. The cost model is
the timed engine iteration at every depth (`pass_ms`), unless the spec sets `cost.cost_ratio`,
which selects Leviathan's `k c + 1` (`c + 1` for every k >= 1 of a drafter that drafts a round in one
pass). With costs profiled at several batch sizes, a depth per
batch size follows, as a schedule of inclusive batch-size ranges. With rank paths measured and
tree passes timed, a draft tree is chosen too (pipeline/core/tree_choice.py); its siblings are the
drafter's top-k, verified as one-hot drafts at temperature above 0, as serving engines draft trees,
and it is weighed against the chain this depth choice serves, with the tokens per pass the choice
predicts for it under its own drafting rule.
"""

from __future__ import annotations

from pipeline.core.categories import choose_by_category
from pipeline.core.choice import choose_depth, depth_per_batch, leviathan_cost
from pipeline.core.contracts import Measured, SelectDepthConfig, Selected
from pipeline.core.schedule import schedule_from_choices
from pipeline.core.tree_choice import choose_tree


def run(config: SelectDepthConfig, inputs: dict, *, num_gpus: float, progress) -> Selected:
    measured: Measured = inputs["curve"]
    cost = inputs["cost"].cost
    primary = measured.primary
    curve, per_prompt, walks = primary.curve, primary.per_prompt, primary.walks
    if cost.pass_ms and len(cost.pass_ms) != len(curve.accept_len):
        raise ValueError(
            f"the cost table timed depths 0..{len(cost.pass_ms) - 1} but the curve has 0..{curve.max_depth}"
        )
    ratio = config.cost_ratio if config.cost_ratio is not None else cost.cost_ratio
    # cost tables from before engine iterations were timed have no pass_ms
    pass_cost = tuple(cost.pass_cost) if config.cost_ratio is None and cost.pass_ms else None
    cost_model = None
    if pass_cost is None and cost.one_pass:  # Leviathan's model with one drafter pass a round
        pass_cost, cost_model = tuple(leviathan_cost(ratio, len(curve.accept_len), one_pass=True)), "leviathan"
    choice = choose_depth(
        curve,
        ratio,
        pass_cost=pass_cost,
        per_prompt=per_prompt or None,
        walks=walks or None,
        seed=config.seed,
        cost_model=cost_model,
    )
    batch_depths = schedule = None
    if cost.draft_ms_by_batch:  # a depth per profiled batch size; batch size 1 keeps the noise-aware choice
        batch_depths = depth_per_batch(curve, cost, first=choice.depth)
        schedule = tuple(schedule_from_choices(batch_depths, max(config.max_batch_size, max(batch_depths))))
    by_category = choose_by_category(measured, ratio, pass_cost=pass_cost, seed=config.seed)
    tree = None
    ranks = primary.rank_paths
    if ranks and cost.tree_verify_ms_by_batch:
        tree = choose_tree(
            ranks,
            cost,
            max_depth=curve.max_depth,
            topk=measured.rank_topk,
            chain_depth=choice.depth,
            chain_tokens=choice.tokens_per_pass,
            seed=config.seed,
        )
    return Selected(
        choice=choice,
        hardware=cost.hardware,
        timed_by=cost.timed_by,
        condition=curve.condition,
        temperature=curve.temperature,
        pass_cost=pass_cost,
        batch_depths=batch_depths,
        schedule=schedule,
        draft_sampling=config.draft_sampling,
        block_drafting=config.block_drafting,
        by_category=by_category,
        tree=tree,
    )
