"""The speculative decoding engine: draft k -> ONE verify pass -> accept/reject -> residual, bonus.

Chain drafting at any depth and temperature, with KV caches for the target and the drafter.
Acceptance rule (Leviathan et al., Chen et al.): draft x is kept with probability
min(1, p(x)/q(x)); at the first rejection the emitted token is drawn from norm(max(0, p - q));
if every draft is kept, a bonus token is drawn from the target's (k+1)-th distribution. At
temperature 0 a draft is kept while it equals the target's argmax, so the output is the
target's own greedy decode.

Drafters plug in as proposers, one per drafter family (`workers/drafters/<family>/proposer.py`):
`start(tokens, streams)`, `propose(depth, temperature, gen) -> (drafts, q)`, `accept(emitted,
streams)`, and for trees `propose_tree` and `accept_tree`. The engine knows nothing else of them.

With `on_round`, each verification is handed over as it ran (`Verified`): the drafts, how many
were accepted, the token emitted after them, and the target's final hidden state at each drafted
position (its output head turns it into p exactly), which on-policy distillation replays
(workers/drafters/opd/rollout.py). The final state is captured in the same verify pass.

The engine's tests: at temperature 0 its output equals the target's own greedy decode; at
temperature 1 a chi-square test on a 12-token vocabulary compares the emitted tokens with the
exact (enumerated) target distribution, for both proposer kinds (EAGLE and standalone), and
resampling from p instead of the residual fails it; a drafter identical to the target accepts
every draft and gets the bonus token.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

import torch

from workers.decoding.sampling import drafting_temperature, one_hot_q, sample
from workers.models.features import cached_forward_states


class Verified(NamedTuple):
    """One verification pass as the engine ran it."""

    anchor: int  # index, in prompt + output, of the token the drafts follow (the last committed one)
    drafts: list[int]  # the k drafted tokens
    accepted: int  # how many of them the target kept
    emitted: int  # the token emitted after the kept ones: the correction, or the bonus when all were kept
    final: torch.Tensor  # [k, d] the target's final hidden state at each drafted position (row j scores drafts[j])


def residual_sample(p: torch.Tensor, q: torch.Tensor, gen: torch.Generator | None) -> int:
    """One draw from norm(max(0, p - q)); from p itself in the measure-zero case p == q. p, q: [V]"""
    r = (p - q).clamp(min=0)
    total = r.sum()
    r = r / total if total > 0 else p
    return int(torch.multinomial(r.cpu(), 1, generator=gen))


def accept_drafts(logits: torch.Tensor, drafts: list[int], q: torch.Tensor | None, temperature: float, gen):
    """logits: [k+1, V] target logits scoring drafts 1..k and the bonus; q: [k, V] draft probs.

    Returns (number of drafts accepted n, the token emitted after them: correction or bonus).
    """
    k = len(drafts)
    if temperature == 0:
        want = logits.argmax(-1).tolist()
        n = 0
        while n < k and drafts[n] == want[n]:
            n += 1
        return n, want[n]
    p = torch.softmax(logits.float() / temperature, dim=-1)  # [k+1, V]
    for j, x in enumerate(drafts):
        ratio = (p[j, x] / q[j, x]).clamp(max=1.0)
        if torch.rand((), generator=gen) >= ratio:  # rejected: resample from the residual
            return j, residual_sample(p[j], q[j], gen)
    return k, int(torch.multinomial(p[k].cpu(), 1, generator=gen))


@torch.no_grad()
def generate(
    target,
    proposer,
    prompt: torch.Tensor,
    *,
    max_new: int,
    depth: int,
    temperature: float,
    gen: torch.Generator | None = None,
    timing: dict | None = None,
    draft_sampling: str = "sampled",
    on_round: Callable[[Verified], None] | None = None,
):
    """Decode max_new tokens after prompt ([1, P]). Returns (tokens, drafts accepted per target pass).

    At temperature > 0, `draft_sampling` says how drafts are drawn and verified
    (workers/decoding/sampling.py): from q, or the drafter's argmax verified with q one-hot.

    depth 0 is plain decoding: one target pass per token, the proposer is never called. With a
    `timing` dict, the decoding after the prompt's pass (prefill excluded) is timed into it:
    decode_s, tokens (every token emitted after the first, overshoot past max_new included) and
    passes (target passes). `on_round` receives every verification (`Verified`) as it runs.
    """
    if depth < 0:
        raise ValueError(f"depth must be >= 0 (0 is plain decoding), got {depth}")
    capture = proposer.capture if depth else ()
    logits, cache, streams = cached_forward_states(target, prompt, None, capture)
    y = int(sample(logits[0, -1].float(), temperature, gen))  # the first token is the target's own
    out, accepted = [y], []
    if depth:
        proposer.start(prompt[0].tolist() + [y], streams)
    draft_temp = drafting_temperature(temperature, draft_sampling)
    final = (target.config.num_hidden_layers,) if on_round is not None and depth else ()  # the last, normed state
    t0 = clock(prompt.device)
    while len(out) < max_new:
        drafts, q = proposer.propose(depth, draft_temp, gen) if depth else ([], None)
        inp = torch.tensor([[y] + drafts], device=prompt.device)
        logits, cache, streams = cached_forward_states(target, inp, cache, capture + final)  # the ONE verify pass
        if drafts and temperature > 0 and draft_temp == 0:  # greedy drafts: q is one-hot on each
            q = one_hot_q(inp[0, 1:], logits.shape[-1])
        n, nxt = accept_drafts(logits[0], drafts, q, temperature, gen)
        if final:
            anchor = prompt.shape[1] + len(out) - 1
            on_round(Verified(anchor, drafts, n, nxt, streams[-1][0, : len(drafts)]))
            streams = streams[: len(capture)]
        if depth - n > 0:
            cache.crop(-(depth - n))  # forget the rejected drafts; y and the accepted ones stay
        emitted = drafts[:n] + [nxt]
        if depth:
            proposer.accept(emitted, [s[:, : n + 1] for s in streams])
        out += emitted
        accepted.append(n)
        y = nxt
    if timing is not None:
        timing.update(decode_s=clock(prompt.device) - t0, tokens=len(out) - 1, passes=len(accepted))
    return out[:max_new], accepted


def clock(device: torch.device) -> float:
    """Wall time in seconds after the device's queued work has finished (on CUDA, every visible GPU's:
    a target split over several has work on each)."""
    if device.type == "cuda":
        for index in range(torch.cuda.device_count()):
            torch.cuda.synchronize(index)
    return time.perf_counter()
