"""The texts of any built-in corpus by name: `stdlib` and `pydoc` (workers/data/corpus.py), `chat`
(workers/data/chat.py, built from those two). The one place that knows both, so that chat.py may
depend on corpus.py and never the other way round.
"""

from __future__ import annotations

from workers.data.chat import chat_documents
from workers.data.corpus import MAX_CHARS, source_documents


def documents(corpus: str, split: str, max_chars: int = MAX_CHARS) -> list[str]:
    """Texts of one split ('train' or 'heldout') of a built-in corpus, in a fixed order, about
    max_chars in total."""
    if corpus == "chat":
        return chat_documents(split, max_chars)
    return source_documents(corpus, split, max_chars)
