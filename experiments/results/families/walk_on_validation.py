"""The decoder's walk over the curve's prompts and over the validation's, against the engine's tokens per
pass on the validation prompts (written for the families rerun of 2026-12-07, README "Why the deeper
depths measured above their predictions"). Run in the folder that ran experiments/families.yaml:

    PYTHONPATH=. python experiments/results/families/walk_on_validation.py eagle-post mtp-vanilla
"""

import sys
from pathlib import Path

import torch

from pipeline.cli.common import open_store
from pipeline.core.acceptance import walk_accept_len
from pipeline.plan import _target_ref
from pipeline.report.data import load_experiment
from pipeline.run.record import finished
from pipeline.spec import parse_spec
from workers.drafters.pairing import load_pairing
from workers.measure.curves import measure_curves

torch.set_num_threads(2)
store = open_store(Path(".specfleet"), None)
record = load_experiment(store, "families")
spec = parse_spec(Path("experiments/families.yaml").read_text())
jobs = store.jobs()
target_job = next(j for j in jobs if j["kind"] == "train_target")
for p in (p for p in record.pairings if p.drafter in sys.argv[1:]):
    drafter_job = next(j for j in jobs if j["kind"] == "train_drafter" and j["name"].endswith("/" + p.drafter))
    inputs = {
        "target": finished(store, "train_target", target_job["job_hash"]),
        "drafter": finished(store, "train_drafter", drafter_job["job_hash"]),
    }
    entry = next(d for d in spec.drafters if d.name == p.drafter)
    evaluation = spec.evaluation_for(entry)
    target, tokenizer, family, drafter = load_pairing(_target_ref(spec.targets[0]), entry, inputs, torch.device("cpu"))
    # the curve's prompts and, after them, the validation's (validation_prompts takes the same draw, continued)
    both = evaluation.model_copy(
        update={
            "num_prompts": evaluation.num_prompts + spec.validation.num_prompts,
            "conditions": evaluation.conditions[:1],
        }
    )
    ((_, _, _, walks, _),) = measure_curves(
        target=target, drafter=drafter, family=family, tokenizer=tokenizer, evaluation=both, seed=spec.seed
    )
    n = evaluation.num_prompts
    print(p.drafter, "walk, curve prompts     ", [round(x, 3) for x in walk_accept_len(walks[:n])])
    print(p.drafter, "walk, validation prompts", [round(x, 3) for x in walk_accept_len(walks[n:])])
    print(p.drafter, "engine, validation      ", [round(x, 3) for x in p.validated.speedup_check.engine_accept_len])
