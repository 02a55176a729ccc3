"""The target's hidden states over its regenerated text, computed once for all its drafters.

An EAGLE drafter trains on the target's captured hidden states and its next-token
distribution at every position. On a real target the target's forward pass is most of a
training step, and every drafter of the target (pre-norm, post-norm, deeper TTT) needs the
same states, so they are computed once per target and fusion and stored: the captured
streams, and the final normed state, from which the target's logits are one matrix product
(its LM head) away. Each sample is run on its own (batched, right-padded), as the target saw
it when it answered.

`FeatureBatches` then serves training windows: token ids, streams, target logits and the
positions that carry a loss, without running the target.
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
    """Hidden states `layers` and the final state at every position of the text. -> (files, metrics)"""
    ids = text.ids
    final = target.config.num_hidden_layers
    wanted = tuple(layers) + ((final,) if final not in layers else ())
    bounds = text.bounds()
    device = next(target.parameters()).device
    d = target.config.hidden_size
    # float16 (half the memory) until some state would not fit in it; float32 from then on
    out = torch.zeros(ids.numel(), len(wanted), d, dtype=torch.float16)
    peak = 0.0
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
        for r, (a, b) in enumerate(bounds[lo:hi]):  # each sample's own positions, not its padding
            states = torch.stack([s[r, : b - a].float().cpu() for s in streams], dim=1)
            peak = max(peak, states.abs().max().item())
            if peak >= FP16_MAX and out.dtype == torch.float16:
                out = out.float()
            out[a:b] = states.to(out.dtype)
        lo = hi
        if progress is not None:
            progress(bounds[lo - 1][1], ids.numel(), float("nan"))
    tensors = {"states": out.contiguous(), "layers": torch.tensor(wanted, dtype=torch.int64)}
    metrics = {
        "tokens": ids.numel(),
        "samples": len(bounds),
        "layers": len(wanted),
        "max_abs": peak,
        "bytes": out.numel() * out.element_size(),
    }
    return {FILE: safetensors.torch.save(tensors)}, metrics


class FeatureBatches:
    """Training windows of a regenerated text with the target's stored states; no target pass.

    Windows come from `Text.sample_rows` (its split: training or held-out samples).
    """

    def __init__(self, target, text: Text, features, capture: tuple[int, ...]):
        """features: the target_features job's result (its folder holds the states)."""
        try:
            t = safetensors.torch.load_file(folder_of(features) / FILE)
            states, layers = t["states"], tuple(t["layers"].tolist())
        except (OSError, KeyError, safetensors.SafetensorError) as exc:
            raise RuntimeError(f"target features: cannot read {FILE} ({exc})") from exc
        if states.shape[0] != text.ids.numel():
            raise RuntimeError(f"target features: {states.shape[0]} positions for a text of {text.ids.numel()} tokens")
        missing = [layer for layer in capture if layer not in layers]
        if missing:
            raise RuntimeError(f"target features: layers {missing} were not stored (stored: {list(layers)})")
        self.target, self.text, self.states, self.split = target, text, states, "train"
        self.columns = [layers.index(layer) for layer in capture]
        self.final = layers.index(target.config.num_hidden_layers)
        self.head = HeadRows(target)  # the target's head rows of the vocab asked for

    def heldout(self) -> FeatureBatches:
        """The same states (not a copy), serving windows of the held-out samples."""
        other = copy.copy(self)
        other.split = "heldout"
        return other

    def sample(self, batch_size: int, seq_len: int, gen: torch.Generator, device, vocab=None):
        """(ids [B, T], streams [B, T, d] float32 each, target logits [B, T, V] float32, loss mask [B, T]).

        vocab: target ids to compute logits for (a drafter's draft vocabulary), in that order; all
        when None. The head over 8k of SmolLM2's 49k ids is a sixth of the work.
        """
        rows = self.text.scored_rows(self.split, batch_size, seq_len, gen)  # [B, T]
        states = self.states[rows].to(device=device, dtype=torch.float32)  # [B, T, L, d]
        streams = [states[:, :, c] for c in self.columns]
        logits = self.head.select(vocab)(states[:, :, self.final])
        return self.text.ids[rows].to(device), streams, logits, self.text.scored[rows].to(device)
