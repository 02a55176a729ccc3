"""The base of every typed contract: a frozen pydantic model that refuses fields it does not declare,
so a stored result reads back into exactly its type."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Contract(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
