"""Pieces of the tiny specs the integration tests run: a built-in target small enough to train in
seconds."""

from __future__ import annotations


def tiny_target(name: str = "t0", steps: int = 20) -> dict:
    """A spec's target entry: a 4-layer, 64-wide Llama over a 400-token vocabulary, trained `steps` steps."""
    return {
        "name": name,
        "builtin": {
            "layers": 4,
            "hidden_size": 64,
            "heads": 4,
            "intermediate_size": 128,
            "vocab_size": 400,
            "train": {"steps": steps, "lr": 0.003, "batch_size": 8, "seq_len": 64},
        },
    }
