"""Whether a drafter loaded as it is (a folder or hub id) fits its target, judged from the two
config.json files, and an EAGLE-3 head's vocabulary maps, before anything is loaded.

- A draft model (`kind: standalone`, `hf:`) scores the target's token ids: its vocab_size is the
  target's (the run compares the two output embeddings).
- An EAGLE-3 head (`kind: eagle3`, `path:`), as workers/drafters/eagle3/layouts.py reads it: it
  fuses target hidden states as wide as its `target_hidden_size`, else its layer's `hidden_size`
  (in a speculators file, `transformer_layer_config`, with LlamaConfig's defaults for what it
  leaves out), which must be the target's hidden_size; its layer's vocab_size, where one is set,
  is the target's; and its draft vocabulary maps into the target's: `draft_vocab_size` at most
  the target's vocab_size, `t2d` one flag per target id, `d2t` (draft id i is target id
  i + d2t[i]) below the target's vocab_size.

Where either config leaves a number out, that comparison is left to the run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.labels import shown


@dataclass(frozen=True)
class ModelConfig:
    """A model's config.json and what it holds."""

    file: Path
    data: dict

    def count(self, key: str) -> int | None:
        """A positive integer setting, at the top or in a nested `text_config`; None when absent."""
        for where in (self.data, self.data.get("text_config")):
            value = where.get(key) if isinstance(where, dict) else None
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None


def read_config(file: Path) -> ModelConfig:
    """The config.json at `file`; LookupError naming it when it cannot be read as a JSON object."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LookupError(f"cannot read {file}: {getattr(exc, 'strerror', None) or exc}") from None
    if not isinstance(data, dict):
        raise LookupError(f"cannot read {file}: not a JSON object")
    return ModelConfig(file, data)


def draft_model_misfits(draft: ModelConfig, target: ModelConfig, target_name: str) -> list[str]:
    """Why a draft model cannot draft for the target, one phrase each; empty when it fits."""
    mine, theirs = draft.count("vocab_size"), target.count("vocab_size")
    if mine is None or theirs is None or mine == theirs:
        return []
    return [
        f"draft model {draft.file} has vocab_size {mine}, but target {shown(target_name)} has vocab_size "
        f"{theirs} ({target.file}); a draft model must share its target's tokenizer"
    ]


def eagle3_misfits(head: ModelConfig, target: ModelConfig, target_name: str) -> list[str]:
    """Why an EAGLE-3 head cannot draft for the target, one phrase each; empty when it fits."""
    hidden, vocab = target.count("hidden_size"), target.count("vocab_size")
    them = f"target {shown(target_name)}"
    out = []
    width, key = _reads_width(head)
    if width is not None and hidden is not None and width != hidden:
        out.append(
            f"EAGLE-3 head {head.file} reads target hidden states {width} wide ({key}), but {them} has "
            f"hidden_size {hidden} ({target.file})"
        )
    if vocab is None:
        return out
    head_vocab = _layer_count(head, "vocab_size")
    if head_vocab is not None and head_vocab != vocab:
        out.append(
            f"EAGLE-3 head {head.file} has vocab_size {head_vocab}, but {them} has vocab_size {vocab} "
            f"({target.file}); the head drafts another tokenizer's ids"
        )
        return out  # its maps are for that other vocabulary: one reason is enough
    drafts = head.count("draft_vocab_size")
    if drafts is not None and drafts > vocab:
        out.append(
            f"EAGLE-3 head {head.file} drafts {drafts} tokens (draft_vocab_size), more than {them}'s vocab_size "
            f"{vocab} ({target.file})"
        )
    return out + _maps_misfit(head.file.parent, vocab, them, target.file)


def _layer_settings(head: ModelConfig) -> dict:
    """The settings of the head's decoder layer as written: the config itself, or a speculators
    file's `transformer_layer_config`."""
    if head.data.get("speculators_model_type") is None:
        return head.data
    layer = head.data.get("transformer_layer_config")
    return layer if isinstance(layer, dict) else {}


def _layer_count(head: ModelConfig, key: str) -> int | None:
    """A setting of the head's layer, with LlamaConfig's default where a speculators file leaves
    it out (that file keeps only what differs from the defaults of its Llama layer)."""
    value = ModelConfig(head.file, _layer_settings(head)).count(key)
    speculators = head.data.get("speculators_model_type") is not None
    if value is None and speculators and _layer_settings(head).get("model_type", "llama") == "llama":
        from transformers import CONFIG_MAPPING  # only for a file that leaves the setting out

        value = CONFIG_MAPPING["llama"]().to_dict().get(key)
    return value


def _reads_width(head: ModelConfig) -> tuple[int | None, str]:
    """How wide the target states the head fuses are, and the setting that says so."""
    given = head.count("target_hidden_size")
    if given is not None:
        return given, "target_hidden_size"
    key = "hidden_size" if head.data.get("speculators_model_type") is None else "transformer_layer_config.hidden_size"
    return _layer_count(head, "hidden_size"), key


def _maps_misfit(folder: Path, vocab: int, them: str, target_file: Path) -> list[str]:
    """The head's t2d and d2t maps (in its .safetensors files) against the target's vocab_size."""
    import numpy as np
    from safetensors import SafetensorError, safe_open

    out = []
    for weights in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(weights), framework="numpy") as f:
                names = set(f.keys())
                if "t2d" in names:
                    (flags,) = f.get_slice("t2d").get_shape()
                    if flags != vocab:
                        out.append(
                            f"EAGLE-3 head {weights} has t2d over {flags} target ids, but {them} has vocab_size "
                            f"{vocab} ({target_file})"
                        )
                if "d2t" in names:
                    offsets = f.get_tensor("d2t").astype(np.int64)
                    top = int((np.arange(len(offsets)) + offsets).max()) if len(offsets) else -1
                    if top >= vocab:
                        out.append(
                            f"EAGLE-3 head {weights} maps a draft id to target id {top} (d2t), past {them}'s "
                            f"vocab_size {vocab} ({target_file})"
                        )
        except (OSError, SafetensorError, ValueError, TypeError):
            continue  # an unreadable weights file is the loader's to name; the maps cannot be judged here
    return out
