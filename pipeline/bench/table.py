"""The tables of `specfleet bench` (bench.md): each measured ratio with the two numbers it divides."""

from __future__ import annotations

from pipeline.report.tables import ReportTable


def _x(value: float) -> str:
    return f"{value:.3g}x" if value < 100 else f"{value:.0f}x"


def bench_tables(r: dict) -> list[ReportTable]:
    c, e, a, o = r["curve_cost"], r["engine"], r["autotune"], r["orchestration"]
    curve, sweep, bound = c["curve"], c["sweep"], c["lower_bound"]
    k, depth = e["chosen_depth"], c["max_depth"]
    ratios = ReportTable(
        f"specfleet bench: {r['experiment']['pairing']}, {r['machine']['cpus']} CPUs ({r['machine']['processor']}), "
        f"torch {r['machine']['torch']}; {r['seconds'] / 60:.1f} min in all",
        ("measure", "specfleet", "against", "ratio"),
        (
            (
                f"curve cost, target passes (accept_len(k), k <= {depth}, {c['positions']} positions)",
                f"{curve['target_passes']} (curve)",
                f"{sweep['target_passes']} (per-depth sweep, k = 1..{depth})",
                _x(curve["target_passes"] / sweep["target_passes"]),
            ),
            (
                "curve cost, target passes",
                f"{curve['target_passes']} (curve)",
                f"{bound['target_passes']} (lower bound: one per position)",
                _x(curve["target_passes"] / bound["target_passes"]),
            ),
            (
                "curve cost, wall time",
                f"{curve['seconds']:.1f} s (curve)",
                f"{sweep['seconds']:.1f} s (per-depth sweep)",
                _x(curve["seconds"] / sweep["seconds"]),
            ),
            (
                "curve cost, wall time",
                f"{curve['seconds']:.1f} s (curve)",
                f"{bound['seconds']:.1f} s (lower bound: one depth-{depth} engine iteration per position, "
                "batch size 1, as profiled)",
                _x(curve["seconds"] / bound["seconds"]),
            ),
            (
                "engine: plain decoding (above 1: faster than HF)",
                f"{e['engine_plain_tokens_per_s']:.1f} tok/s (engine, k = 0)",
                f"{e['hf_plain_tokens_per_s']:.1f} tok/s (HF generate)",
                _x(e["engine_plain_over_hf"]),
            ),
            (
                f"engine at the chosen depth k = {k}",
                f"{e['engine_chosen_tokens_per_s']:.1f} tok/s",
                f"{e['hf_plain_tokens_per_s']:.1f} tok/s (HF generate)",
                _x(e["engine_chosen_over_hf"]),
            ),
            (
                f"engine at the chosen depth k = {k}",
                f"{e['engine_chosen_tokens_per_s']:.1f} tok/s",
                f"{e['engine_plain_tokens_per_s']:.1f} tok/s (engine, k = 0)",
                _x(e["engine_chosen_over_plain"]),
            ),
            (
                "autotune: cost of choosing k",
                f"{a['choose_s']:.1f} s (curve + cost profile and select jobs)",
                f"{a['brute_force_s']:.1f} s (brute force: the engine at k = 0..{depth})",
                _x(a["choose_over_brute_force"]),
            ),
            (
                "autotune: regret in tokens/s (held-out prompts)",
                f"{a['chosen_regret']:.1%} (chose k = {a['chosen_depth']})",
                f"{a['brute_force_regret']:.1%} (brute force chose k = {a['brute_force_depth']}; best k = "
                f"{a['best_held_out_depth']})",
                "",
            ),
            (
                f"orchestration: {o['jobs']} select_depth jobs, per job",
                f"{o['ray_ms_per_job']:.1f} ms (Ray + MLflow + database)",
                f"{o['direct_ms_per_job']:.1f} ms (direct call)",
                f"+{o['ray_overhead_ms']:.1f} ms ({_x(o['ray_overhead_share'])} the job's time)",
            ),
            (
                "orchestration: in-process executor, per job",
                f"{o['local_ms_per_job']:.1f} ms (MLflow + database)",
                f"{o['direct_ms_per_job']:.1f} ms (direct call)",
                f"+{o['local_overhead_ms']:.1f} ms ({_x(o['local_overhead_share'])} the job's time)",
            ),
        ),
    )
    by_depth: dict[int, dict[str, dict]] = {}
    for row in r["training"]:
        by_depth.setdefault(row["ttt_depth"], {})["cached" if row["features"] == "cached" else "uncached"] = row
    training = ReportTable(
        "drafter training, tokens/s by TTT depth (share of time in the target's forward pass)",
        ("TTT depth", "target pass per batch", "features cached", "cached over target pass"),
        tuple(
            (
                str(d),
                f"{v['uncached']['tokens_per_s']:.0f} ({v['uncached']['target_forward_share']:.0%})",
                f"{v['cached']['tokens_per_s']:.0f} ({v['cached']['target_forward_share']:.0%})",
                _x(v["cached"]["tokens_per_s"] / v["uncached"]["tokens_per_s"]),
            )
            for d, v in sorted(by_depth.items())
        ),
    )
    groups = ReportTable(
        "drafter training on Ray Train workers: the same CPUs shared out (tokens/s in the training steps; "
        "checkpoints: the group reporting its state, ten times a run; wall time adds starting the group and "
        "loading the target)",
        ("layout", "CPUs per worker", "tokens/s", "over one process", "checkpoints", "wall time", "held-out loss"),
        tuple(
            (
                g["layout"],
                f"{g['cpus_per_worker']:g}",
                f"{g['tokens_per_s']:.0f}",
                _x(g["tokens_per_s"] / r["training_groups"][0]["tokens_per_s"]),
                f"{g['checkpoint_seconds']:.1f} s",
                f"{g['wall_seconds']:.1f} s",
                f"{g['val_loss']:.4f}",
            )
            for g in r.get("training_groups", ())
        ),
    )
    return [ratios, training, groups] if r.get("training_groups") else [ratios, training]
