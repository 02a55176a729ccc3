"""Production acceptance from a vLLM Prometheus exposition (its `vllm:spec_decode_*` counters).

vLLM counts, per served model, the drafts it verified (`num_drafts`), the drafted tokens, the
accepted tokens and the accepted tokens per draft position. Two scrapes give a window;
`survival[j] = accepted_per_pos[j-1] / num_drafts` over that window. Bad or partial input
(missing positions, counters that went backwards, no drafts) is refused with a clear message.


`specfleet autotune --engine E --from-metrics URL_OR_FILE [--from-metrics LATER] --drafter-path
P [--cost-ratio C]` recovers `survival[j]` this way, recomputes the depth, re-derives the depth
per batch size from the offline choice's batch-size costs (when it had them), stores the result
as a new active `production` version (unless the active one was decided from the same inputs,
pipeline/autotune/retune_inputs.py: then it says it reused that one; `--dry-run` stores
nothing), reports how far production survival is from the offline curve, and prints the engine
config. It works for a deployment the database has never seen: the target comes from the
metrics' `model_name`, the method from the drafter folder's `config.json` (or `--method`).
Metrics that cannot give a curve are refused with one line: a position missing (seen from
`num_draft_tokens / num_drafts` and from per-position counts not adding up to
`num_accepted_tokens`); a server that drafted fewer tokens than its positions at some batch
sizes (a per-batch-size depth: `num_draft_tokens` more than 1% short of `num_drafts` x
positions, which would read as low survival at the deep positions); a counter that went
backwards; no drafts. A source that is not a metrics page (over 64 MiB, not UTF-8, not answered
in full within 30 s, NaN, infinite or negative counters, a position label that is not 0..255) is
refused the same way.
"""

from __future__ import annotations

import http.client
import math
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from pipeline.core.acceptance import accept_len_from_survival, cond_from_survival
from pipeline.core.labels import label_problem, shown
from pipeline.core.types import Curve
from pipeline.errors import UserError

PREFIX = "vllm:spec_decode_"
COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
# drafts may come up short of the depth for reasons other than a schedule (a request near its
# length limit); more than this share missing means the server ran several depths
SHORT_DRAFTS = 0.01


@dataclass(frozen=True)
class SpecDecodeCounters:
    model_name: str | None
    num_drafts: float
    num_draft_tokens: float
    num_accepted_tokens: float
    accepted_per_pos: tuple[float, ...]  # index i = draft position i (0-based)


MAX_BYTES = 64 << 20  # a /metrics page is kilobytes; a server answering more is not one
READ_TIMEOUT_S = 30.0  # the whole answer, not each network read: a server trickling bytes is cut off
MAX_POSITIONS = 256  # draft positions a server counts (depths beyond this are not speculative decoding)


def read_source(source: str, timeout_s: float = READ_TIMEOUT_S) -> str:
    """The exposition text of a file path or an http(s) URL: at most MAX_BYTES, UTF-8, and a URL
    answered in full within timeout_s. Anything else is a UserError naming the source."""
    if source.startswith(("http://", "https://")):
        blob = _fetch(source, timeout_s)
    else:
        path = Path(source)
        if not path.is_file():
            raise UserError(f"--from-metrics: no such file {source}")
        if path.stat().st_size > MAX_BYTES:
            raise UserError(f"--from-metrics: {source} is larger than {MAX_BYTES} bytes: not a metrics page")
        try:
            blob = path.read_bytes()
        except OSError as exc:
            raise UserError(f"--from-metrics: cannot read {source}: {exc.strerror or exc}") from None
    try:
        return blob.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"--from-metrics: {source} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _fetch(url: str, timeout_s: float) -> bytes:
    deadline = time.monotonic() + timeout_s
    chunks, size = [], 0
    try:
        with urllib.request.urlopen(url, timeout=min(timeout_s, 10.0)) as resp:  # noqa: S310 (user-given URL)
            while chunk := resp.read1(1 << 16):
                size += len(chunk)
                if size > MAX_BYTES:
                    raise UserError(f"--from-metrics: {url} answered more than {MAX_BYTES} bytes: not a metrics page")
                if time.monotonic() > deadline:
                    raise UserError(f"--from-metrics: {url} did not answer in full within {timeout_s:g} s")
                chunks.append(chunk)
    except (OSError, ValueError, http.client.HTTPException) as exc:  # refused, unreachable, bad URL or HTTP
        raise UserError(f"--from-metrics: cannot read {url}: {_reason(exc)}") from None
    return b"".join(chunks)


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
    return " ".join(str(reason).split())


def parse_counters(text: str, model_name: str | None = None) -> SpecDecodeCounters:
    """Sum the spec-decode counters over engines for one model (the only one when not given)."""
    totals: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    models: set[str] = set()
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as exc:  # the parser raises ValueError, and worse on some malformed pages
        raise UserError(f"--from-metrics: not a Prometheus text exposition ({_reason(exc)[:200]})") from None
    for family in families:
        for sample in family.samples:
            name = sample.name.removesuffix("_total")
            if not name.startswith(PREFIX) or sample.name.endswith("_created"):
                continue
            model = sample.labels.get("model_name")
            models.add(model)
            if model_name is not None and model != model_name:
                continue
            key = name.removeprefix(PREFIX)
            if key not in COUNTERS and key != "num_accepted_tokens_per_pos":
                continue
            value = sample.value
            if not math.isfinite(value) or value < 0:
                raise UserError(f"--from-metrics: counter {sample.name} is {value:g}: counters are finite and >= 0")
            if key == "num_accepted_tokens_per_pos":
                pos = _position(sample.labels.get("position"))
                per_pos[pos] = per_pos.get(pos, 0.0) + value
            else:
                totals[key] = totals.get(key, 0.0) + value
    if model_name is None and len(models) > 1:
        listed = ", ".join(shown(m or "") for m in sorted(models, key=str)[:5]) + (", ..." if len(models) > 5 else "")
        raise UserError(f"--from-metrics: several models in the metrics ({listed}); name one with --model")
    missing = [c for c in COUNTERS if c not in totals]
    if missing:
        raise UserError(
            f"--from-metrics: no vllm:spec_decode_{missing[0]}_total counter "
            "(is speculative decoding enabled on this server?)"
        )
    if not per_pos:
        raise UserError("--from-metrics: no vllm:spec_decode_num_accepted_tokens_per_pos_total counters")
    gaps = sorted(set(range(max(per_pos) + 1)) - set(per_pos))
    if gaps:
        raise UserError(f"--from-metrics: accepted-per-position counters missing for positions {gaps}")
    _check_positions(totals, per_pos)
    name = model_name if model_name is not None else next(iter(models))
    problem = label_problem(name) if name else None  # no label at all: --model names the target
    if problem:
        raise UserError(
            f"--from-metrics: the model_name label {shown(name)} {problem}; it names the target in the "
            "database: serve the model under a shorter name (vLLM --served-model-name)"
        )
    return SpecDecodeCounters(
        name,
        totals["num_drafts"],
        totals["num_draft_tokens"],
        totals["num_accepted_tokens"],
        tuple(per_pos[i] for i in range(len(per_pos))),
    )


def _position(label: str | None) -> int:
    if label is None or not label.isdigit() or int(label) >= MAX_POSITIONS:
        raise UserError(
            f"--from-metrics: a per-position counter has position label {label!r}; positions are 0..{MAX_POSITIONS - 1}"
        )
    return int(label)


def _check_positions(totals: dict[str, float], per_pos: dict[int, float]) -> None:
    """Every draft position must be there: vLLM counts num_draft_tokens = sum of the drafts' lengths
    and num_accepted_tokens = the sum over positions, so a trimmed exposition shows in both."""
    positions = len(per_pos)
    drafts, draft_tokens, accepted = totals["num_drafts"], totals["num_draft_tokens"], totals["num_accepted_tokens"]
    if drafts > 0 and draft_tokens > drafts * positions * (1 + 1e-9):
        deepest = math.ceil(draft_tokens / drafts - 1e-9)
        raise UserError(
            f"--from-metrics: {draft_tokens:g} draft tokens over {drafts:g} drafts means some drafts had "
            f"{deepest} tokens, but the accepted-per-position counters stop at position {positions - 1}: "
            f"positions {list(range(positions, deepest))} are missing (a trimmed exposition?)"
        )
    counted = sum(per_pos.values())
    # a scrape can land between two counters' updates: allow one draft's worth of difference
    if not math.isclose(counted, accepted, rel_tol=1e-6, abs_tol=max(0.5, positions)):
        raise UserError(
            f"--from-metrics: accepted-per-position counters add up to {counted:g} but "
            f"vllm:spec_decode_num_accepted_tokens_total is {accepted:g}; positions are missing "
            "or the counters come from different scrapes"
        )


def window(before: SpecDecodeCounters, after: SpecDecodeCounters) -> SpecDecodeCounters:
    """What happened between two scrapes; a counter that went backwards means a restart."""
    if len(before.accepted_per_pos) != len(after.accepted_per_pos):
        raise UserError("--from-metrics: the two scrapes have different numbers of draft positions")
    pairs = [(c, getattr(before, c), getattr(after, c)) for c in COUNTERS]
    pairs += [
        (f"accepted_per_pos[{i}]", a, b)
        for i, (a, b) in enumerate(zip(before.accepted_per_pos, after.accepted_per_pos))
    ]
    for name, a, b in pairs:
        if b < a:
            raise UserError(
                f"--from-metrics: counter {name} went backwards ({a:g} -> {b:g}): the server "
                "restarted between the scrapes; take both after the restart"
            )
    return SpecDecodeCounters(
        after.model_name,
        *(b - a for _, a, b in pairs[: len(COUNTERS)]),
        tuple(b - a for _, a, b in pairs[len(COUNTERS) :]),
    )


def production_curve(counters: SpecDecodeCounters, *, temperature: float, condition: str = "production") -> Curve:
    """The acceptance curve the counters imply (pooled over every verified draft)."""
    if counters.num_drafts <= 0:
        raise UserError("--from-metrics: no drafts were verified in this window (num_drafts = 0)")
    drafts, positions = counters.num_drafts, len(counters.accepted_per_pos)
    if counters.num_draft_tokens < drafts * positions * (1 - SHORT_DRAFTS):
        raise UserError(
            f"--from-metrics: {counters.num_draft_tokens:g} draft tokens over {drafts:g} drafts is "
            f"{counters.num_draft_tokens / drafts:.2f} per draft, not the {positions} positions "
            "counted: the server drafts fewer tokens at some batch sizes (a per-batch-size depth), so survival "
            "at the deep positions cannot be read from these counters; scrape a window where the server ran "
            "one depth (a server on specfleet's per-batch-size schedule: serve one depth while scraping)"
        )
    survival = [a / drafts for a in counters.accepted_per_pos]
    if any(s > 1.0 + 1e-9 for s in survival) or any(b > a + 1e-9 for a, b in zip(survival, survival[1:])):
        raise UserError(
            "--from-metrics: accepted-per-position counts are inconsistent "
            "(survival must fall with position and stay <= 1)"
        )
    return Curve(
        condition=condition,
        temperature=temperature,
        num_chains=int(counters.num_drafts),
        cond_accept=tuple(cond_from_survival(survival)),
        survival=tuple(survival),
        accept_len=tuple(accept_len_from_survival(survival)),
    )
