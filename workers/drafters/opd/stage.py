"""The distillation stage after a drafter's own training (a distill_drafter job): Draft-OPD, its
random-anchor ablation, or imitation continued, for the same optimizer steps and learning rates.

Draft-OPD (`opd`): `rounds` times, roll out `prompts` training questions with the current drafter
(workers/drafters/opd/rollout.py; the target verifies, so the text keeps its distribution), then take
`steps_per_round` optimizer steps, each on `batch_size` of those rollouts replayed from their
verification anchors (workers/drafters/opd/replay.py; a round's rollouts go through the target once).
`opd_random_anchor` replays the same rollouts with each accepted stream moved to a random start (drawn
once a round). `imitation` takes the same number of steps of the drafter's own training loss
(EAGLE-3's TTT) on its own training batches: the control that separates "more training" from
"on-policy training". All three use one schedule: AdamW, a linear warm-up over
the first 5% of the steps and a cosine decay to 0 (the official code's), gradients clipped at 1.

Each round's rollouts are also the stage's own measure of the drafter: the mean tokens per target
pass it decoded with, before that round's updates (`rollout_tokens_per_pass_round<r>`), logged beside
the last replay's loss terms.
"""

from __future__ import annotations

import time

import torch

from workers.data.prompts import pick
from workers.data.regenerate import question_prompts
from workers.drafters.chain.loss import weighted_chain_loss
from workers.drafters.chain.proposer import ChainProposer
from workers.drafters.eagle3.train import ttt_weights
from workers.drafters.opd.batch import replay_batch, rows_of
from workers.drafters.opd.replay import ReplayWeights, replay_loss
from workers.drafters.opd.rollout import roll_out
from workers.drafters.training import optimizer_step, training_sources
from workers.runtime.lr_schedule import warmup_cosine_lr

WARMUP_SHARE = 0.05
STAGE_DRAWS = 1_000_003  # the stage's generator seed, past the training's (which is the spec's seed)


def distill(*, target, tokenizer, drafter, spec, questions, seed: int, device, progress=None, data=None, features=None):
    """Train `drafter` (an EAGLE-3 drafter, in place) through `spec.distill`. questions: (max_prompt_tokens,
    prompts file or None), where the rollouts' training questions come from. Returns the metrics."""
    stage = spec.distill
    torch.manual_seed(seed)
    # not the generator the drafter's own training drew its batches from: the control sees new batches
    gen = torch.Generator().manual_seed(seed + STAGE_DRAWS)
    vocab = drafter.draft_ids() if drafter.cfg.draft_vocab else None
    if stage.method == "imitation":
        batches, _, _, _ = training_sources(target, tokenizer, spec.train, drafter.cfg.capture_layers, data, features)
        chain_loss = weighted_chain_loss(ttt_weights(spec.train.ttt_depth))

        def step_loss(step: int):
            ids, streams, logits, mask = batches.sample(spec.train.batch_size, spec.train.seq_len, gen, device, vocab)
            return chain_loss(drafter, ids, streams, logits, mask)[0], {}

        return _optimise(drafter, stage, step_loss, progress, {})
    pool = question_prompts(tokenizer, questions[0], seed, questions[1])
    if len(pool) < stage.prompts:
        raise ValueError(
            f"distill.prompts: {stage.prompts} rollouts a round, but only {len(pool)} training questions fit in "
            f"training_data.max_prompt_tokens {questions[0]}"
        )
    weights = ReplayWeights(stage.decay, stage.accepted_weight, stage.rejected_weight)
    ablation = torch.Generator().manual_seed(seed + 1) if stage.method == "opd_random_anchor" else None
    metrics: dict = {}
    state = {}  # "batch": the round's rollouts, batched once (ids, streams, chains)

    def step_loss(step: int):
        if step % stage.steps_per_round == 0:  # a new round: roll out with the drafter as it is now
            r = step // stage.steps_per_round
            chosen = pick(len(pool), stage.prompts, seed + r)
            drafter.eval()
            rollouts = roll_out(
                target,
                ChainProposer(drafter),
                [torch.tensor(pool[i]) for i in chosen],
                depth=stage.depth,
                max_new=stage.max_new_tokens,
                temperature=stage.temperature,
                gen=gen,
            )
            drafter.train()
            rounds = [v for ro in rollouts for v in ro.rounds]
            metrics[f"rollout_tokens_per_pass_round{r}"] = sum(v.accepted + 1 for v in rounds) / len(rounds)
            state["batch"] = replay_batch(target, rollouts, drafter.cfg.capture_layers, vocab, ablation)
        ids, streams, chains = state["batch"]
        rows = torch.randperm(ids.shape[0], generator=gen)[: stage.batch_size].tolist()
        return replay_loss(drafter, *rows_of(ids, streams, chains, rows), weights)

    return _optimise(drafter, stage, step_loss, progress, metrics)


def _optimise(drafter, stage, step_loss, progress, metrics: dict) -> dict:
    """stage.steps steps of AdamW on step_loss(step) -> (loss, stats); the last step's loss and stats go
    into the returned metrics beside `metrics`."""
    params = [p for p in drafter.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=stage.lr, weight_decay=0.0)
    warmup = max(1, round(WARMUP_SHARE * stage.steps))
    t0, loss_v, stats = time.perf_counter(), float("nan"), {}
    drafter.train()
    for step in range(stage.steps):
        for group in opt.param_groups:
            group["lr"] = warmup_cosine_lr(stage.lr, step, stage.steps, warmup=warmup, decay_during_warmup=False)
        loss, stats = step_loss(step)
        loss_v = optimizer_step(opt, params, loss)
        if progress is not None:
            progress(step + 1, stage.steps, loss_v)
    drafter.eval()
    return {
        **metrics,
        **{f"last_{k}": v for k, v in stats.items()},
        "distill_loss": loss_v,
        "distill_steps": stage.steps,
        "distill_seconds": time.perf_counter() - t0,
    }
