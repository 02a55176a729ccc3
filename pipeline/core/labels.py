"""Free text that the database and MLflow keep as a label: target and drafter names, model ids,
hardware descriptions, prompt categories.

A label is checked where it enters (a command-line flag, a metrics label, a spec field, a
prompts file), so a refusal names that place and nothing has been written yet; the store's own
checks (db/writes.py) are the last line, not the first. A label is 1 to `LABEL_MAX` characters,
none of them a control or other non-printing character (a newline would break every one-line
message and table row that shows it).
"""

from __future__ import annotations

LABEL_MAX = 255  # characters: the database's name, model id, hardware and category columns
SHOWN_MAX = 60  # characters of an overlong value quoted back in a message


def label_problem(value: object, limit: int = LABEL_MAX) -> str | None:
    """What is wrong with `value` as a stored label (a phrase to follow its name), or None."""
    if not isinstance(value, str):
        return f"must be text, got {type(value).__name__}"
    if not value.strip():
        return "is empty"
    if len(value) > limit:
        return f"is {len(value)} characters long; at most {limit} are stored"
    odd = next((c for c in value if not c.isprintable()), None)
    if odd is not None:
        return f"holds the non-printing character {odd!r}"
    return None


def shown(value: str, limit: int = SHOWN_MAX) -> str:
    """`value` quoted for a one-line message: its repr (escapes included), cut to `limit`
    characters, the cut marked."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 2]}…{text[-1]}"
