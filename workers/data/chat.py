"""A chat-style corpus from what every machine has, and the prompt formats drift shows under.

Samples pair a question with an answer: a standard-library function's docstring asks for the
function, whose code (docstring removed) answers; a `pydoc_data` topic title asks for its prose.
Each sample is wrapped in a chat template (system prompt, user turn, assistant turn) after BOS.
Evaluation prompts can then drop the template, the BOS token, or both, or prepend many earlier
turns (long context), which is what makes template perturbations mean something.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass
from functools import lru_cache

from pipeline.core.conversations import Conversation, Message
from workers.data.corpus import MAX_CHARS, cap, check_split, is_heldout, raw_documents

SYSTEM, USER, ASSISTANT, END = "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"
CHAT_TOKENS = [SYSTEM, USER, ASSISTANT, END]
SYSTEM_PROMPTS = (
    "You are a careful Python programmer.",
    "You answer questions about Python with working code.",
    "You are a helpful assistant for the Python standard library.",
)
MAX_ANSWER_CHARS = 1500


@dataclass(frozen=True)
class Sample:
    system: str
    question: str
    answer: str

    def conversation(self) -> Conversation:
        """The sample as a conversation: system, user and assistant turns."""
        return Conversation(
            (Message("system", self.system), Message("user", self.question), Message("assistant", self.answer))
        )


def _system_for(key: str) -> str:
    return SYSTEM_PROMPTS[int(hashlib.sha256(key.encode()).hexdigest(), 16) % len(SYSTEM_PROMPTS)]


def function_samples(name: str, source: str) -> list[Sample]:
    """One sample per documented function of a module's source."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    lines = source.splitlines()
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        doc = ast.get_docstring(node)
        if not doc or len(doc) < 20:
            continue
        first = node.body[0]  # the docstring's statement: its lines are left out of the answer
        skip = range(first.lineno, first.end_lineno + 1)
        body = [lines[i - 1] for i in range(node.lineno, node.end_lineno + 1) if i not in skip]
        answer = "\n".join(line for line in body if line.strip())[:MAX_ANSWER_CHARS]
        question = doc.split("\n\n")[0].strip()[:300]
        out.append(Sample(_system_for(f"{name}:{node.name}"), question, answer))
    return out


def topic_samples(topics: dict[str, str]) -> list[tuple[str, Sample]]:
    return [
        (key, Sample(_system_for(key), f"Explain the Python topic '{key}'.", text.strip()[:MAX_ANSWER_CHARS]))
        for key, text in sorted(topics.items())
    ]


TAGS = {"system": SYSTEM, "user": USER, "assistant": ASSISTANT}


def render_turns(messages, *, template: bool = True, generation_prompt: bool = False) -> str:
    """Turns as specfleet's template writes them: `<|role|>text<|end|>` joined by newlines, then
    `<|assistant|>` when the assistant's turn is to follow. Without the template only the user and
    assistant texts remain, one per line. BOS is added by the tokeniser step, or left out."""
    if template:
        text = "\n".join(f"{TAGS[m.role]}{m.content}{END}" for m in messages)
        return text + (f"\n{ASSISTANT}" if generation_prompt else "")
    text = "\n".join(m.content for m in messages if m.role != "system")
    return text + ("\n" if generation_prompt else "")


def render(sample: Sample, *, template: bool = True, answer: bool = True) -> str:
    """The sample's text, to the end of its answer or to where the answer begins."""
    messages = sample.conversation().messages
    return render_turns(messages if answer else messages[:-1], template=template, generation_prompt=not answer)


@lru_cache(maxsize=4)
def samples(split: str) -> tuple[Sample, ...]:
    """Every chat sample of one split, in a fixed order (split by source document)."""
    from pydoc_data.topics import topics

    want = split == "heldout"
    out: list[Sample] = []
    for name, source in raw_documents("stdlib"):
        if is_heldout(name) == want:
            out.extend(function_samples(name, source))
    out.extend(s for key, s in topic_samples(topics) if is_heldout(f"pydoc:{key}") == want)
    return tuple(out)


def chat_documents(split: str, max_chars: int = MAX_CHARS) -> list[str]:
    """The chat corpus's texts of one split ('train' or 'heldout'): every sample rendered with its
    template, thinned evenly (every k-th sample) to about max_chars in total."""
    check_split(split)
    return cap([render(s) for s in samples(split)], max_chars)
