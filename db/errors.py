"""The one exception the db package raises for its callers to handle."""

from __future__ import annotations

from db.secrets import mask_secrets


class StoreError(RuntimeError):
    """A database could not be opened, or a write was refused. The message is one line."""


def one_line(error: BaseException) -> str:
    """The driver's own message when there is one (not SQLAlchemy's wrapper), on one line, its
    secrets masked."""
    cause = getattr(error, "orig", None) or error
    return mask_secrets(" ".join(str(cause).split())) or type(cause).__name__
