"""Counts said in words in report and engine notes: "1 token", "2 tokens"."""

from __future__ import annotations


def counted(n: int, noun: str) -> str:
    """`n` and the noun, singular for exactly one (`noun` is the singular; the plural adds an s)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
