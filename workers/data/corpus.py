"""Built-in corpora that exist on every machine with Python, split into train and held-out.

`stdlib`: the Python standard library's own source files (code).
`pydoc`:  `pydoc_data.topics` (English prose from the Python reference manual).
The split is by document, decided by a hash of the document's name, so it is stable across
machines and runs; held-out documents never reach training.

This module knows only the raw corpora. The `chat` corpus (question/answer samples built from
both, in a chat template) lives in workers/data/chat.py, which builds on this one; workers/data/texts.py
gives every corpus, `chat` included, by name.
"""

from __future__ import annotations

import hashlib
import sysconfig
from functools import cache
from pathlib import Path

HELDOUT_PERCENT = 10
MAX_CHARS = 6_000_000  # enough for every built-in training budget; keeps tokenising fast


def is_heldout(name: str) -> bool:
    return int(hashlib.sha256(name.encode()).hexdigest(), 16) % 100 < HELDOUT_PERCENT


@cache
def raw_documents(corpus: str) -> tuple[tuple[str, str], ...]:
    """(name, text) pairs, sorted by name."""
    if corpus == "stdlib":
        root = Path(sysconfig.get_paths()["stdlib"])
        docs = []
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith(("site-packages/", "test/", "idlelib/idle_test/")) or "/tests/" in rel:
                continue
            try:
                docs.append((rel, path.read_text(encoding="utf-8")))
            except (UnicodeDecodeError, OSError):
                continue  # a handful of stdlib files are deliberately not UTF-8
        return tuple(docs)
    if corpus == "pydoc":
        from pydoc_data.topics import topics

        return tuple((f"pydoc:{k}", v) for k, v in sorted(topics.items()))
    raise ValueError(f"unknown corpus '{corpus}' (built-in corpora: stdlib, pydoc)")


def check_split(split: str) -> None:
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")


def source_documents(corpus: str, split: str, max_chars: int = MAX_CHARS) -> list[str]:
    """Texts of one split ('train' or 'heldout') of a raw corpus (stdlib, pydoc), in a fixed order,
    stopping once max_chars are reached. The chat corpus: workers.data.texts.documents."""
    check_split(split)
    want_heldout = split == "heldout"
    out, total = [], 0
    for name, text in raw_documents(corpus):
        if is_heldout(name) != want_heldout or not text.strip():
            continue
        out.append(text)
        total += len(text)
        if total >= max_chars:
            break
    return out


def cap(texts: list[str], max_chars: int) -> list[str]:
    """Spread the budget over the whole list (every k-th text) so no part of it is left out."""
    total = sum(len(t) for t in texts)
    if total <= max_chars:
        return texts
    stride = -(-total // max_chars)
    return texts[::stride]
