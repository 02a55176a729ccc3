"""What people would rather see than read: curve plots and the best-depth table."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from pipeline.core.types import Curve
from pipeline.core.words import counted


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (workers and CI have no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def integer_depths(axes) -> None:
    """Whole-number ticks on the x axes: depths and tree sizes."""
    from matplotlib.ticker import MaxNLocator

    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def save_figure(fig, path: str | Path, title: str) -> Path:
    fig.suptitle(title)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return Path(path)


def plot_trees(choice, path: str | Path, title: str, measured: dict[int, float] | None = None) -> Path:
    """A decoder's tokens per target pass and the predicted speedup (batch size 1) of the best tree
    of every size, the chosen one marked; `measured`: {tree size: tokens per pass the engine emitted}."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6))
    sizes = [len(c.tree) for c in choice.candidates]
    ax1.plot(sizes, [c.decode_accept_len for c in choice.candidates], "o-", label="best tree (predicted)")
    ax1.axhline(choice.chain_decode_accept_len, color="grey", ls=":", label=f"chain k = {choice.chain_depth}")
    if measured:
        ax1.plot(list(measured), list(measured.values()), "s", color="C3", label="engine (measured)")
    ax1.set(xlabel="draft tokens in the tree", ylabel="tokens per target pass", title="tokens per pass")
    ax1.legend(fontsize=8)
    ax2.plot(sizes, [c.speedups[0] for c in choice.candidates], "o-")
    ax2.axvline(len(choice.tree), color="C3", ls="--", label=f"chosen: {counted(len(choice.tree), 'token')}")
    ax2.axhline(choice.chain_speedup, color="grey", ls=":", label="chain")
    ax2.set(xlabel="draft tokens in the tree", ylabel="predicted speedup", title="batch size 1")
    ax2.legend(fontsize=8)
    return save_figure(fig, path, title)


def plot_tree_check(check, path: str | Path, title: str) -> Path:
    """By tree size: the tokens per pass expected from the measured rank paths and those the engine
    emitted, and the predicted against the measured speedup, with the chain's measured one."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.5, 3.8))
    order = sorted(range(len(check.trees)), key=lambda i: len(check.trees[i]))
    sizes = [len(check.trees[i]) for i in order]
    chosen = len(check.trees[0])
    ax1.plot(sizes, [check.decode_accept_len[i] for i in order], "o--", label="expected (rank paths)")
    ax1.plot(sizes, [check.engine_accept_len[i] for i in order], "s-", label="measured (engine)")
    ax1.axvline(chosen, color="C3", ls=":", label="chosen tree")
    ax1.set(xlabel="draft tokens in the tree", ylabel="tokens per target pass", title="tokens per pass")
    ax1.legend(fontsize=8)
    ax2.plot(sizes, [check.predicted_speedup[i] for i in order], "o--", label="predicted")
    ax2.plot(sizes, [check.measured_speedup[i] for i in order], "s-", label="measured (engine)")
    ax2.axhline(
        check.chain_tokens_per_s / check.plain_tokens_per_s,
        color="grey",
        ls=":",
        label=f"chain k = {check.chain_depth} (measured)",
    )
    ax2.axhline(1.0, color="grey", lw=0.8)
    ax2.axvline(chosen, color="C3", ls=":")
    ax2.set(
        xlabel="draft tokens in the tree",
        ylabel="speedup over plain decoding",
        title=f"chosen tree vs chain: {check.over_chain:.3f}x measured",
    )
    ax2.legend(fontsize=8)
    integer_depths((ax1, ax2))
    return save_figure(fig, path, title)


def best_table(rows: list[dict], *, versioned: bool) -> Table:
    """The chosen depth per pairing; `versioned` adds the tuned-config version and its source
    (rows from the database's `best`, not a run's own choices)."""
    table = Table(title="best depth per pairing")
    cols = ("target", "drafter", "hardware", "depth", "accept_len", "speedup", "cost_ratio")
    trees = any(r.get("tree") for r in rows)
    engine_timed = any(r.get("timed_by") not in (None, "specfleet") for r in rows)  # a serving engine's clock
    extra = (("tree", "tree vs chain") if trees else ()) + (("costs timed by",) if engine_timed else ())
    for col in cols + extra + (("version", "source") if versioned else ()):
        table.add_column(col, justify="right" if col in ("depth", "accept_len", "speedup", "cost_ratio") else "left")
    for r in rows:
        cells = [
            r["target"],
            r["drafter"],
            r["hardware"],
            str(r["depth"]),
            f"{r['accept_len']:.3f}",
            f"{r['speedup']:.3f}x",
            f"{r['cost_ratio']:.3f}",
        ]
        if trees:
            cells += [tree_label(r["tree"]) if r.get("tree") else "-", _tree_gain(r) if r.get("tree") else "-"]
        if engine_timed:
            cells.append(r.get("timed_by") or "-")
        if versioned:
            cells += [f"v{r['version']}" + ("" if r["active"] else " (old)"), r["source"]]
        table.add_row(*cells)
    return table


def _tree_gain(row: dict) -> str:
    text = f"{row['tree_speedup'] / row['tree_chain_speedup']:.3f}x predicted"
    if row.get("tree_measured_over_chain") is not None:
        text += f", {row['tree_measured_over_chain']:.3f}x measured"
    return text


def tree_label(tree) -> str:
    """A tree in a few words: its draft tokens, depth and widest branching."""
    from pipeline.core.trees import check_tree, shape

    sh = shape(check_tree(tree))
    return f"{counted(sh.nodes, 'token')}, depth {sh.depth}, top-{sh.topk}"


def console_category_table(rows: list[dict]) -> Table:
    """Per pairing, the depth over every prompt (the tuned config) and the depth each prompt
    category would get on its own; rows from `best` with their `categories`."""
    table = Table(title="best depth per pairing and prompt category")
    for col in ("target", "drafter", "hardware", "category", "prompts", "depth", "decode_accept_len", "speedup"):
        table.add_column(
            col, justify="right" if col in ("prompts", "depth", "decode_accept_len", "speedup") else "left"
        )
    for r in rows:
        tokens = r["decode_accept_len"] if r["decode_accept_len"] is not None else r["accept_len"]
        table.add_row(
            r["target"],
            r["drafter"],
            r["hardware"],
            "all prompts",
            "",
            str(r["depth"]),
            f"{tokens:.3f}",
            f"{r['speedup']:.3f}x",
            end_section=not r["categories"],
        )
        for i, c in enumerate(r["categories"]):
            tokens = c["decode_accept_len"] if c["decode_accept_len"] is not None else c["accept_len"]
            table.add_row(
                "",
                "",
                "",
                c["category"],
                str(c["prompts"]),
                str(c["depth"]),
                f"{tokens:.3f}",
                f"{c['speedup']:.3f}x",
                end_section=i == len(r["categories"]) - 1,
            )
    return table


def speedup_table(checks: list[tuple]) -> Table:
    """Predicted vs measured speedup per depth; checks: (target, drafter, speedup_check result)."""
    table = Table(title="predicted vs measured speedup (real engine, batch size 1)")
    for col in ("target", "drafter", "k", "predicted", "measured", "tokens/s", "engine_accept_len", ""):
        table.add_column(col, justify="left" if col in ("target", "drafter", "") else "right")
    for target, drafter, check in checks:
        for k, (pred, meas) in enumerate(zip(check.predicted_speedup, check.measured_speedup)):
            table.add_row(
                target if k == 0 else "",
                drafter if k == 0 else "",
                str(k),
                f"{pred:.3f}x",
                f"{meas:.3f}x",
                f"{check.tokens_per_s[k]:.1f}",
                f"{check.engine_accept_len[k]:.3f}",
                depth_marks(check, k),
            )
        verdict = (
            f"[green]passed[/green]: chosen k reaches {check.chosen_vs_best:.1%} of the best"
            if check.passed
            else "[red]failed[/red]: " + "; ".join(check.problems)
        )
        table.add_row("", "", "", "", "", "", "", verdict, end_section=True)
    return table


def depth_marks(check, k: int) -> str:
    """What depth k is in an engine benchmark: the chosen depth, the best measured one, both or neither."""
    return ", ".join(
        m for m, on in (("chosen", k == check.chosen_depth), ("best measured", k == check.best_measured_depth)) if on
    )


def hf_predicted(check, run) -> float | None:
    """specfleet's predicted speedup at the depth an HF assisted run drafted, where that run drafts a fixed
    number of tokens (no confidence cut-off) within the benchmarked depths; else None."""
    k = run.num_assistant_tokens
    if k is None or run.confidence_threshold != 0 or k >= len(check.predicted_speedup):
        return None
    return check.predicted_speedup[k]


def engine_tables(checks: list[tuple]):
    """speedup_table, and console_hf_table below it when a check timed HF generate too."""
    from rich.console import Group

    hf = console_hf_table(checks)
    return Group(speedup_table(checks), hf) if hf is not None else speedup_table(checks)


def console_hf_table(checks: list[tuple]) -> Table | None:
    """HF generate beside specfleet's engine on the same prompts; None when no check timed it."""
    rows = [(t, d, c) for t, d, c in checks if c.hf_runs]
    if not rows:
        return None
    table = Table(title="Hugging Face generate on the same prompts (an engine specfleet did not write)")
    for col in ("target", "drafter", "engine", "tokens/s", "vs HF generate", "specfleet predicted", "greedy diffs"):
        table.add_column(col, justify="left" if col in ("target", "drafter", "engine") else "right")
    for target, drafter, check in rows:
        plain = check.hf_runs[0].tokens_per_s
        ours = check.tokens_per_s[check.chosen_depth]
        table.add_row(
            target,
            drafter,
            f"specfleet engine, chosen k={check.chosen_depth}",
            f"{ours:.1f}",
            f"{ours / plain:.3f}x",
            f"{check.predicted_speedup[check.chosen_depth]:.3f}x",
            "",
        )
        for run in check.hf_runs:
            at = hf_predicted(check, run)
            predicted = f"{at:.3f}x" if at is not None else ""
            table.add_row(
                "",
                "",
                f"HF {run.name}",
                f"{run.tokens_per_s:.1f}",
                f"{run.speedup:.3f}x",
                predicted,
                str(run.mismatches),
            )
        table.add_section()
    return table


def plot_comparison(curves: dict[str, Curve], path: str | Path, title: str) -> Path:
    """Every pairing's survival and accept_len curves in one figure."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for label, curve in sorted(curves.items()):
        ax1.plot(range(1, curve.max_depth + 1), curve.survival, "o-", label=label)
        ax2.plot(range(curve.max_depth + 1), curve.accept_len, "o-", label=label)
    ax1.set(xlabel="depth j", ylabel="survival[j]", ylim=(0, 1.02), title="P(at least j drafts accepted)")
    ax2.set(xlabel="depth k", ylabel="accept_len(k)", title="tokens per target pass")
    ax1.legend(fontsize=8)
    return save_figure(fig, path, title)
