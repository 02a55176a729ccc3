"""The keys a spec section takes, and the one a mistyped key was most likely meant to be.

pydantic says only that a key is unknown (`extra_forbidden`) and where. `known_keys` walks the
spec's types along that location (models, lists, dicts, unions, including the drafter union,
whose location carries the kind it chose) to the section's model, and `nearest_key` picks its
closest key by difflib, so `evaluation: {temprature: ...}` is answered "did you mean
'temperatures'?".
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel, Tag

# parts of a location that name a validator, not a key the user wrote
_VALIDATOR_PARTS = ("function-after", "function-before", "function-wrap", "function-plain", "tagged-union")


def known_keys(annotation: Any, loc: tuple) -> set[str]:
    """The keys the mapping at `loc` (pydantic's location of it) inside a value of type
    `annotation` takes; empty where that is no model."""
    loc = tuple(p for p in loc if not (isinstance(p, str) and p.startswith(_VALIDATOR_PARTS)))
    origin = get_origin(annotation)
    if origin is Annotated:
        return known_keys(get_args(annotation)[0], loc)
    if origin in (typing.Union, types.UnionType):
        found: set[str] = set()
        for member in get_args(annotation):
            found |= known_keys(member, loc)
            if loc and isinstance(loc[0], str) and _labels(member, loc[0]):
                found |= known_keys(member, loc[1:])  # pydantic names the branch it tried
        return found
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if not loc:
            return set(annotation.model_fields)
        field = annotation.model_fields.get(loc[0]) if isinstance(loc[0], str) else None
        return known_keys(field.annotation, loc[1:]) if field is not None else set()
    if origin in (list, tuple) and loc and isinstance(loc[0], int):
        return known_keys(get_args(annotation)[0], loc[1:])
    if origin is dict and loc:
        return known_keys(get_args(annotation)[1], loc[1:])
    return set()


def nearest_key(key: str, known: set[str]) -> str | None:
    """The known key closest to `key`, when one is close enough to be a typo of it."""
    close = difflib.get_close_matches(key, sorted(known), n=1)
    return close[0] if close else None


def _labels(member: Any, part: str) -> bool:
    """Whether `part` of a location is the label pydantic gives the union branch `member`: its
    Tag (the drafter kind), or its type written out (`list[Pairing]`)."""
    if get_origin(member) is Annotated and any(isinstance(a, Tag) and a.tag == part for a in get_args(member)[1:]):
        return True
    return "[" in part or part == getattr(member, "__name__", None)
