"""A job's pairing loaded onto a worker: its target, tokenizer, drafter family and drafter."""

from __future__ import annotations

from workers.drafters.registry import family_of
from workers.models.loading import load_target


def load_pairing(target_ref, drafter_spec, inputs: dict, device, split: tuple[int, ...] = ()):
    """(target, tokenizer, family, drafter) of a job's pairing, from its config and inputs; the
    target split over the GPUs `split` when more than one, the drafter on `device`."""
    target, tokenizer = load_target(target_ref, inputs.get("target"), device, split)
    family = family_of(drafter_spec.kind)
    return target, tokenizer, family, family.load(drafter_spec, inputs.get("drafter"), target)
