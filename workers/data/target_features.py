"""The target's hidden states over its regenerated text, computed once for all its drafters.

A drafter that reads the target (EAGLE-3, MTP, DFlash) trains on the target's hidden states at
some layers and its next-token distribution at every position. On a real target the target's
forward pass is most of a training step, and the drafters of a target read the same or
overlapping layers, so one pass of the target computes every layer any of them reads, stored one
tensor per layer: the captured streams, and the final normed state, from which the target's
logits are one matrix product (its LM head) away. Each sample is run on its own (batched,
right-padded), as the target saw it when it answered.

`FeatureBatches` then serves training windows of the layers one drafter reads: token ids,
streams, target logits and the positions that carry a loss, without running the target.
"""

from __future__ import annotations

import copy

import safetensors.torch
import torch

from pipeline.core.artifacts import folder_of
from workers.data.regenerate import Text
from workers.models.features import HeadRows, target_pass

FILE = "features.safetensors"
FP16_MAX = 60000.0  # states stored in float16 unless some value would not fit


@torch.no_grad()
def compute_features(
    target, text: Text, layers: tuple[int, ...], *, max_tokens: int = 8192, progress=None
) -> tuple[dict[str, bytes], dict]:
    """Hidden states `layers` and the final state at every position of the text. -> (files, metrics)

    Each layer is its own tensor, float16 until one of its values would not fit (float32 from then
    on), so a layer's stored values do not depend on which other layers were computed with it.
    """
    ids = text.ids
    final = target.config.num_hidden_layers
    wanted = tuple(layers) + ((final,) if final not in layers else ())
    bounds = text.bounds()
    device = next(target.parameters()).device
    d = target.config.hidden_size
    out = [torch.zeros(ids.numel(), d, dtype=torch.float16) for _ in wanted]  # [N, d] per layer
    peak = [0.0] * len(wanted)
    lo = 0
    while lo < len(bounds):  # batches of samples up to max_tokens, padded on the right
        hi = lo + 1
        width = bounds[lo][1] - bounds[lo][0]
        while hi < len(bounds) and (hi - lo + 1) * max(width, bounds[hi][1] - bounds[hi][0]) <= max_tokens:
            width = max(width, bounds[hi][1] - bounds[hi][0])
            hi += 1
        batch = torch.zeros(hi - lo, width, dtype=torch.long)
        for r, (a, b) in enumerate(bounds[lo:hi]):
            batch[r, : b - a] = ids[a:b]
        streams, _ = target_pass(target, batch.to(device), wanted)
        for j, stream in enumerate(streams):
            for r, (a, b) in enumerate(bounds[lo:hi]):  # each sample's own positions, not its padding
                states = stream[r, : b - a].float().cpu()
                peak[j] = max(peak[j], states.abs().max().item())
                if peak[j] >= FP16_MAX and out[j].dtype == torch.float16:
                    out[j] = out[j].float()
                out[j][a:b] = states.to(out[j].dtype)
        lo = hi
        if progress is not None:
            progress(bounds[lo - 1][1], ids.numel(), float("nan"))
    tensors = {_key(layer): t.contiguous() for layer, t in zip(wanted, out)}
    metrics = {
        "tokens": ids.numel(),
        "samples": len(bounds),
        "layers": len(wanted),
        "max_abs": max(peak),
        "bytes": sum(t.numel() * t.element_size() for t in out),
    }
    return {FILE: safetensors.torch.save(tensors)}, metrics


def _key(layer: int) -> str:
    return f"hidden_states.{layer}"


class FeatureBatches:
    """Training windows of a regenerated text with the target's stored states; no target pass.

    Windows come from `Text.sample_rows` (its split: training or held-out samples).
    """

    def __init__(self, target, text: Text, features, capture: tuple[int, ...]):
        """features: the target_features job's result (its folder holds the states)."""
        wanted = tuple(dict.fromkeys((*capture, target.config.num_hidden_layers)))  # the final state last
        try:
            with safetensors.safe_open(folder_of(features) / FILE, framework="pt") as f:
                stored = sorted(int(k.removeprefix(_key(""))) for k in f.keys())
                missing = [layer for layer in wanted if layer not in stored]
                if missing:
                    raise RuntimeError(f"target features: layers {missing} were not stored (stored: {stored})")
                layers = [f.get_tensor(_key(layer)) for layer in wanted]  # only the layers it reads
        except (OSError, ValueError, safetensors.SafetensorError) as exc:
            raise RuntimeError(f"target features: cannot read {FILE} ({exc})") from exc
        dtype = torch.float32 if any(t.dtype == torch.float32 for t in layers) else torch.float16
        states = torch.stack([t.to(dtype) for t in layers], dim=1)  # float16 -> float32 is exact
        if states.shape[0] != text.ids.numel():
            raise RuntimeError(f"target features: {states.shape[0]} positions for a text of {text.ids.numel()} tokens")
        self.target, self.text, self.states, self.split = target, text, states, "train"  # states [N, L, d]
        self.columns = [wanted.index(layer) for layer in capture]
        self.final = wanted.index(target.config.num_hidden_layers)
        self.head = HeadRows(target)  # the target's head rows of the vocab asked for

    def heldout(self) -> FeatureBatches:
        """The same states (not a copy), serving windows of the held-out samples."""
        other = copy.copy(self)
        other.split = "heldout"
        return other

    def sample(self, batch_size: int, seq_len: int, gen: torch.Generator, device, vocab=None, part=None):
        """(ids [B, T], streams [B, T, d] float32 each, target logits [B, T, V] float32, loss mask [B, T]).

        vocab: target ids to compute logits for (a drafter's draft vocabulary), in that order; all
        when None. The head over 8k of SmolLM2's 49k ids is a sixth of the work. part: the rows of
        the batch to return (one worker's share of a batch drawn alike by every worker).
        """
        rows = self.text.scored_rows(self.split, batch_size, seq_len, gen)  # [B, T]
        rows = rows if part is None else rows[part]
        states = self.states[rows].to(device=device, dtype=torch.float32)  # [B, T, L, d]
        streams = [states[:, :, c] for c in self.columns]
        logits = self.head.select(vocab)(states[:, :, self.final])
        return self.text.ids[rows].to(device), streams, logits, self.text.scored[rows].to(device)
