"""Hugging Face `generate` as a second engine that specfleet did not write.

What a user has without specfleet is the target's own `generate`; with a standalone draft model,
HF's assisted generation (`assistant_model=`), which drafts `num_assistant_tokens` tokens and
stops a draft early when the assistant's top probability falls under
`assistant_confidence_threshold` (HF's defaults: 20 drafts, threshold 0.4, a constant schedule).
Timing it beside specfleet's engine answers two questions: does the depth specfleet chose beat
what HF does by default, and does specfleet's predicted speedup hold on an engine it did not
write?

Each run decodes `new_tokens` tokens after every prompt, EOS ignored (as specfleet's engine
does), and is timed twice: for new_tokens and for two tokens. The difference is the decoding
after the prompt's pass (and, when assisted, after the assistant's own prefill and first
round), the figure specfleet's engine reports. generate() fills every setting left unset from
the model's own generation config (its EOS, a repetition penalty, ...); while timing, the
target and the assistant carry a default one, so only the settings given here apply.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import GenerationConfig

from pipeline.core.contracts import HFRun
from workers.decoding.chain import clock

HF_DEFAULTS = {
    "num_assistant_tokens": 20,
    "num_assistant_tokens_schedule": "constant",
    "assistant_confidence_threshold": 0.4,
}


@dataclass(frozen=True)
class HFTiming:
    """HF generate with one setting over the validation prompts."""

    tokens_per_s: float
    mismatches: int  # greedy: prompts whose output differs from the reference (plain HF generate)
    outputs: tuple[tuple[int, ...], ...]


def _config(new_tokens: int, temperature: float, pad: int) -> GenerationConfig:
    sampling = (
        {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
        if temperature > 0
        else {"do_sample": False}
    )
    return GenerationConfig(
        max_new_tokens=new_tokens, min_new_tokens=0, eos_token_id=None, pad_token_id=pad, **sampling
    )


@contextmanager
def _bare_generation_config(*models):
    """The models with a default generation config (no EOS, no penalties) inside the block."""
    saved = [m.generation_config for m in models]
    try:
        for m in models:
            m.generation_config = GenerationConfig()
        yield
    finally:
        for m, cfg in zip(models, saved):
            m.generation_config = cfg


@torch.no_grad()
def _decode(target, prompt: torch.Tensor, new_tokens: int, temperature: float, pad: int, assistant, seed: int):
    """(tokens after the prompt, seconds) of one generate call."""
    torch.manual_seed(seed)  # generate() samples from torch's global generator
    extra = {"assistant_model": assistant} if assistant is not None else {}
    t0 = clock(prompt.device)
    out = target.generate(
        input_ids=prompt,
        attention_mask=torch.ones_like(prompt),
        generation_config=_config(new_tokens, temperature, pad),
        **extra,
    )
    return out[0, prompt.shape[1] :].tolist(), clock(prompt.device) - t0


def time_hf(
    target,
    prompts: list[torch.Tensor],
    *,
    new_tokens: int,
    temperature: float,
    pad: int,
    seed: int,
    assistant=None,
    drafts: tuple[int, float] | None = None,
    reference: list[list[int]] | None = None,
    warmup: int = 1,
) -> HFTiming:
    """tokens/s of HF generate; with `assistant`, assisted generation drafting drafts = (tokens a
    round, confidence threshold)."""
    if new_tokens < 3:
        raise ValueError(f"new_tokens must be >= 3 to time decoding after the first round, got {new_tokens}")
    models = (target,) if assistant is None else (target, assistant)
    with _bare_generation_config(*models):
        if assistant is not None:  # HF reads the assistant's settings from its own generation config
            _with_settings(assistant, *drafts)
        device = next(target.parameters()).device
        for prompt in prompts[:warmup]:
            _decode(target, prompt[None].to(device), 4, temperature, pad, assistant, seed)
        seconds, tokens, outputs, mismatches = 0.0, 0, [], 0
        for i, prompt in enumerate(prompts):
            ids = prompt[None].to(device)
            out, full = _decode(target, ids, new_tokens, temperature, pad, assistant, seed + i)
            _, first = _decode(target, ids, 2, temperature, pad, assistant, seed + i)
            if len(out) != new_tokens:
                raise RuntimeError(f"HF generate stopped after {len(out)} of {new_tokens} tokens")
            seconds += max(full - first, 1e-9)
            tokens += len(out) - 2
            outputs.append(tuple(out))
            if reference is not None and temperature == 0 and list(out) != list(reference[i]):
                mismatches += 1
    return HFTiming(tokens / seconds, mismatches, tuple(outputs))


def _with_settings(assistant, num_assistant_tokens: int, threshold: float) -> None:
    """Set the assistant's own generation config: k drafts per round, a constant schedule, and the
    confidence threshold (0: never stop a draft early)."""
    cfg = assistant.generation_config
    cfg.num_assistant_tokens_schedule = "constant"
    cfg.num_assistant_tokens = num_assistant_tokens
    cfg.assistant_confidence_threshold = threshold


def hf_comparison(
    target, prompts, *, new_tokens: int, temperature: float, pad: int, seed: int, assistant=None, max_depth: int = 0
) -> tuple[HFRun, ...]:
    """Plain HF generate; with a draft model, HF assisted generation at k = 1..max_depth drafts
    (no early stop) and with HF's defaults. Each run's speedup is over plain generate."""
    timing = dict(new_tokens=new_tokens, temperature=temperature, pad=pad, seed=seed)
    plain = time_hf(target, prompts, **timing)
    settings = []  # (name, drafts a round, confidence threshold)
    if assistant is not None:
        settings = [(f"assisted k={k}", k, 0.0) for k in range(1, max_depth + 1)]
        settings.append(
            (
                "assisted (HF defaults)",
                HF_DEFAULTS["num_assistant_tokens"],
                HF_DEFAULTS["assistant_confidence_threshold"],
            )
        )
    reference = [list(o) for o in plain.outputs]
    runs = [
        HFRun(
            name="generate",
            num_assistant_tokens=None,
            confidence_threshold=None,
            tokens_per_s=plain.tokens_per_s,
            speedup=1.0,
            mismatches=plain.mismatches,
        )
    ]
    for name, k, threshold in settings:
        t = time_hf(target, prompts, **timing, assistant=assistant, drafts=(k, threshold), reference=reference)
        runs.append(
            HFRun(
                name=name,
                num_assistant_tokens=k,
                confidence_threshold=threshold,
                tokens_per_s=t.tokens_per_s,
                speedup=t.tokens_per_s / plain.tokens_per_s,
                mismatches=t.mismatches,
            )
        )
    return tuple(runs)
