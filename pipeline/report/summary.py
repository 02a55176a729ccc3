"""The summary a report opens with: per pairing, in words, what to serve (the depth, the depth per
batch size, or the draft tree where the tree is what serving runs), the engine flags that serve
it, the verdict of the checks that held the choice to an engine, and the gain predicted and
measured.

What is served is read as `specfleet autotune` reads it (pipeline/autotune/choice_row.py): a tree
only where it is predicted to beat the chain at every batch size (`serves_tree`), else the chain.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from pipeline.autotune.choice_row import choice_row, extrapolated, schedule_of, tree_of
from pipeline.core.words import counted
from pipeline.report.engine_flags import CONFIG_DIR, DRAFTER_PATH, SERVED_AS, EngineFlags, engine_flags, speculates
from pipeline.report.figures import LEVEL
from pipeline.report.plots import tree_label
from pipeline.report.prediction_table import pairing_checks
from pipeline.report.serving_table import share_text


@dataclass(frozen=True)
class PairingSummary:
    sentences: tuple[str, ...]
    flags: tuple[EngineFlags, ...]  # each engine's flags, after the sentences

    def html(self) -> str:
        parts = [f"<p>{html.escape(s)}</p>" for s in self.sentences]
        for f in self.flags:
            parts.append(
                f"<p>{html.escape(f.engine)}:" + (f" not served: {html.escape(f.refused)}</p>" if f.refused else "</p>")
            )
            if f.text:
                parts.append(f"<pre>{html.escape(f.text)}</pre>")
            for path, content in f.files.items():
                parts.append(f"<p>{html.escape(path)} holds:</p><pre>{html.escape(content.rstrip())}</pre>")
            parts += [f"<p>note: {html.escape(n)}</p>" for n in f.notes]
        return "\n".join(parts)

    def markdown(self) -> str:
        parts = list(self.sentences)
        for f in self.flags:
            parts.append(f"{f.engine}:" + (f" not served: {f.refused}" if f.refused else ""))
            if f.text:
                parts.append(f"```\n{f.text}\n```")
            for path, content in f.files.items():
                parts.append(f"{path} holds:\n\n```\n{content.rstrip()}\n```")
            parts += [f"note: {n}" for n in f.notes]
        return "\n\n".join(parts)


def pairing_summary(pairing) -> PairingSummary:
    """What one pairing's summary says (a pairing whose depth choice did not finish says only that)."""
    selected = pairing.selected
    if selected is None:
        return PairingSummary(("No setting chosen: the pairing's depth choice did not finish.",), ())
    sentences = [serve_sentence(selected), *verdict_sentences(pairing), gain_sentence(pairing)]
    flags: tuple[EngineFlags, ...] = ()
    command = f"`specfleet autotune --engine ENGINE --target {pairing.target} --drafter {pairing.drafter}`"
    if not speculates(selected):
        sentences.append("Engine flags: none; start the engine without a drafter.")
    elif pairing.drafter_kind not in SERVED_AS:
        sentences.append(
            f"Engine flags: the stored jobs do not say what kind of drafter this is; {command} prints them."
        )
    else:
        sentences.append(
            f"Engine flags, as {command} prints them at each engine's default release, with {DRAFTER_PATH} for "
            f"the drafter it exports and {CONFIG_DIR}/ for the folder it writes engine files to:"
        )
        flags = engine_flags(selected, pairing.drafter_kind, block_size=pairing.drafter_block_size)
    return PairingSummary(tuple(sentences), flags)


def serve_sentence(selected) -> str:
    """What serving runs: the tree, no speculation, one depth, or a depth per batch-size range."""
    row = choice_row(selected)
    tree = tree_of(row)
    if tree is not None:
        choice = selected.tree
        return (
            f"Serve the draft tree of {tree_label(tree)} at every batch size: it is predicted to run "
            f"{choice.over_chain:.2f}x as fast as the chain at depth k = {choice.chain_depth}."
        )
    schedule = schedule_of(row)
    if max(k for _, _, k in schedule) == 0:
        return "Serve without speculation: plain decoding (k = 0) is predicted fastest at every batch size."
    if len({k for _, _, k in schedule}) > 1:
        text = "Serve a depth per batch size: " + ", ".join(_range(lo, hi, k) for lo, hi, k in schedule)
    else:
        k = schedule[0][2]
        text = f"Serve the chain at depth k = {k} ({counted(k, 'draft token')} per step)"
        text += (
            " at every batch size" if selected.schedule is not None else "; its costs were timed at batch size 1 only"
        )
    past = extrapolated(row)
    if past:
        text += (
            f"; batch sizes {past[0]}-{past[1]} keep k = {schedule[-1][2]} unmeasured (depths were measured up to "
            f"batch size {row['schedule_measured_to']})"
        )
    return text + "."


def _range(lo: int, hi: int, k: int) -> str:
    sizes = f"batch size {lo}" if lo == hi else f"batch sizes {lo}-{hi}"
    return f"{'no speculation' if k == 0 else f'k = {k}'} at {sizes}"


def verdict_sentences(pairing) -> tuple[str, ...]:
    """The verdict of each check that held the choice to an engine, or that none did."""
    out = []
    if pairing.validated is not None:
        check = pairing.validated.speedup_check
        if not check.passed:
            verdict = "failed: " + "; ".join(check.problems)
        elif tree_of(choice_row(pairing.selected)) is not None:
            verdict = f"passed: the served tree is within {check.tolerance:.0%} of the best shape measured"
        else:
            verdict = f"passed: the chosen depth reaches {check.chosen_vs_best:.1%} of the best measured tokens/s"
        out.append(f"Verdict of specfleet's engine on {check.hardware}: {verdict}.")
    if pairing.served is not None:
        check = pairing.served.serving_check
        if check is None:
            out.append(f"Verdict of the serving engine: it cannot serve this drafter: {pairing.served.refused}.")
        else:
            if not check.passed:
                verdict = "failed: " + "; ".join(check.problems)
            else:
                verdict = "passed" + (f": the printed config reaches {_shares(check)}" if check.chosen_vs_best else "")
            out.append(f"Verdict of {check.engine} on {check.hardware}: {verdict}.")
    return tuple(out) or ("Verdict: not validated (no speedup or serving check ran).",)


def _shares(check) -> str:
    """The printed config's share of the engine's fastest depth per batch size: "96.7% of the
    engine's fastest depth at batch size 1, 95.5% at batch size 8"."""
    shares = [f"{share_text(check, b)} at batch size {b}" for b in sorted(check.chosen_vs_best)]
    first, *rest = shares
    share, _, where = first.partition(" at ")
    return ", ".join([f"{share} of the engine's fastest depth at {where}", *rest])


def gain_sentence(pairing) -> str:
    """The speedup over plain decoding predicted for what is served, and what the engines measured."""
    selected, check = pairing.selected, pairing.validated.speedup_check if pairing.validated else None
    kind = "of the curve's prompt" if pairing.validated_on_curve else "held-out prompt"
    prompts = f" on {counted(pairing.held_out_prompts, kind)}" if pairing.held_out_prompts else ""
    if not speculates(selected):
        text = "Gain: none; plain decoding is predicted fastest."
        if check is not None and check.best_measured_depth != 0:
            k = check.best_measured_depth
            text += f" Specfleet's engine measured k = {k} fastest ({check.measured_speedup[k]:.2f}x){prompts}."
        return text
    if tree_of(choice_row(selected)) is not None:
        predicted = selected.tree.speedup
        measured = check.tree.measured_speedup[0] if check is not None and check.tree is not None else None
    else:
        predicted = selected.choice.speedup
        measured = check.measured_speedup[check.chosen_depth] if check is not None else None
    interval = ""
    if measured is not None and tree_of(choice_row(selected)) is None:
        closeness = pairing_checks(pairing)
        if closeness:
            c = closeness[check.chosen_depth]
            interval = f" ({LEVEL:.0%} interval for a validation of this size: {c.lo:.2f}-{c.hi:.2f}x)"
    text = f"Gain at batch size 1: predicted {predicted:.2f}x{interval}, " + (
        f"measured {measured:.2f}x{prompts} by specfleet's engine." if measured is not None else "not measured."
    )
    served = pairing.served.serving_check if pairing.served is not None else None
    if served is not None and served.chosen:
        at = " and ".join(
            f"{p.measured_speedup:.2f}x at batch size {p.batch_size}"
            for p in sorted(served.chosen, key=lambda p: p.batch_size)
        )
        text += f" {served.engine} measured {at} with the printed config."
    return text
