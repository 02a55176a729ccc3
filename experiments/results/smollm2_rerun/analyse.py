"""Per pairing of one experiment: costs by batch size, timing sigma, the choice, the schedule, the
prediction checks at every depth, and the batch depths under the joint rule against the rule it
replaced (`greedy`: each batch size capped by the one before, as pipeline/core/choice.py chose
before commit bb54953; kept here only to compare). Wrote analysis.txt:

    python experiments/results/smollm2_rerun/analyse.py smollm2 .specfleet > analysis.txt
"""

import sys
from pathlib import Path

from pipeline.cli.common import open_store
from pipeline.core.choice import batch_speedup, depth_per_batch
from pipeline.core.timing_noise import prediction_sigma
from pipeline.report.data import load_experiment
from pipeline.report.prediction_table import pairing_checks

name, workdir = sys.argv[1], Path(sys.argv[2] if len(sys.argv) > 2 else ".specfleet")
record = load_experiment(open_store(workdir, None), name)
print("experiment", record.ref, record.code_version)
for kind, secs in sorted(record.job_seconds.items()):
    print(f"  {kind}: {len(secs)} jobs, {sum(secs):.0f} s ({', '.join(f'{s:.0f}' for s in secs)})")


def greedy(curve, cost, first):
    tokens = curve.decode_accept_len or curve.accept_len
    out, cap = {}, None
    for b, draft, verify in zip(cost.batch_sizes, cost.draft_ms_by_batch, cost.verify_ms_by_batch):
        s = batch_speedup(tokens[: len(verify)], draft_ms=draft, verify_ms=verify, one_pass=cost.one_pass)
        k = max(range(len(s)), key=lambda k: (s[k], -k))
        if cap is None and first is not None:
            k = first
        out[b] = k if cap is None else min(k, cap)
        cap = out[b]
    return out


for p in record.pairings:
    print("\n==", p.label, "kind", p.drafter_kind)
    if p.profiled:
        cost = p.profiled.cost
        print("  hardware", cost.hardware, "timed_by", cost.timed_by)
        print("  pass_cost", [round(x, 3) for x in cost.pass_cost])
        print("  sigma", round(prediction_sigma(cost.pass_ms_blocks), 4) if cost.pass_ms_blocks else None)
        curve = p.measured.primary.curve if p.measured else None
        for b, draft, verify in zip(cost.batch_sizes, cost.draft_ms_by_batch, cost.verify_ms_by_batch):
            line = f"  B={b:3d} draft {draft:.2f} ms verify " + " ".join(f"{v:.2f}" for v in verify)
            if curve:
                tokens = curve.decode_accept_len or curve.accept_len
                s = batch_speedup(tokens[: len(verify)], draft_ms=draft, verify_ms=verify, one_pass=cost.one_pass)
                line += " | speedup " + " ".join(f"{x:.3f}" for x in s)
            print(line)
    if p.selected:
        s = p.selected
        print(
            "  choice k",
            s.choice.depth,
            "speedup",
            round(s.choice.speedup, 3),
            "tokens/pass",
            round(s.choice.tokens_per_pass, 3),
            "model",
            s.choice.cost_model,
        )
        print("  batch_depths", s.batch_depths, "measured_to", s.schedule_measured_to)
        print("  schedule", s.schedule)
        if p.measured and p.profiled:
            curve = p.measured.primary.curve
            print("  DP     ", depth_per_batch(curve, p.profiled.cost, first=s.choice.depth))
            print("  greedy ", greedy(curve, p.profiled.cost, s.choice.depth))
    if p.validated:
        chk = p.validated.speedup_check
        print("  validated chosen", chk.chosen_depth, "measured", [round(x, 3) for x in chk.measured_speedup])
    for c in pairing_checks(p):
        print(
            f"   k={c.depth} pred {c.predicted:.3f} [{c.lo:.3f},{c.hi:.3f}] meas {c.measured:.3f} "
            f"bias {c.bias:+.1%} tok {c.acceptance_factor - 1:+.1%} cost {c.cost_factor - 1:+.1%} "
            f"{'covered' if c.covered else 'MISS'}"
        )
