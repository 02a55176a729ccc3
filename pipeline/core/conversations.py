"""Prompts files: a user's chat data as conversations, from JSONL, JSON or Parquet.

A spec takes them as `evaluation.prompts` (and `training_data.prompts`), instead of the
built-in corpora: a path, or {path: ..., category: FIELD} (pipeline/core/settings.py). Each
record is one conversation in one of three common shapes:
- ShareGPT: `{"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", ...}]}`
  (`from`: system, human or user, gpt or assistant; a few other assistant names are accepted);
- OpenAI chat: `{"messages": [{"role": "user", "content": "..."}, ...]}` (`content` a string or a
  list of text parts; `developer` counts as system);
- plain: `{"prompt": "..."}`, with an optional reference answer in `completion` or `response`.

A record may carry a category (a string field, `category` unless the spec names another): curves
and depths are then also reported per category. A JSONL file holds one record per line; a JSON
file a list of records; a Parquet file one record per row (told apart by the suffix). Every
problem is one line naming the file and the line (JSONL) or record number (counted from 1).

Only the standard library and (for Parquet) pyarrow are used, so the driver checks a file when
it reads the spec, before anything runs, and workers read the same file the same way.

- Rendering. A prompt is the conversation up to its last user turn, rendered with the target
  tokenizer's own chat template and the generation prompt (specfleet's template for the
  built-in targets), after BOS, then `answer_prefix` tokens of the reply that followed, if the
  file has one. A conversation longer than `prompt_len` loses its oldest exchanges first (its
  system turn stays), then the end of its last user turn. The template conditions
  (`no_template`, `template_no_bos`, `long_context`, ...) apply to file prompts as to the chat
  corpus.
- Categories. `category: null` names none; records without one are `uncategorized` when others
  have one. Each category gets its own curve, pooled from its prompts' chains exactly as the
  whole curve pools all of them (no extra target passes), and its own batch-1 depth, chosen by
  the same noise-aware rule with the same costs (pipeline/core/categories.py). They are stored
  in `curves` (column `category`; "" is every prompt together) and `category_depths`, logged to
  MLflow (`accept_len/<condition>/T<t>/<category>` per curve job, `depth/<category>` per select
  job), drawn by `specfleet report` and shown by `specfleet best --by-category`. The tuned
  config, and so `autotune`, stays the choice over every prompt.
- Checked before anything starts. A record that is not one of the shapes, an unknown role, an
  empty turn, a non-text part, a category that is not a string, bad JSON or UTF-8, or fewer
  conversations than `num_prompts` (plus `validation.num_prompts`, drawn from the rest) is one
  line naming the file and line or record, exit 2, nothing written. The same file for training
  and evaluation is refused.
- Identity. Jobs are keyed by the file's sha256, not its path: moving it reuses every result,
  editing it measures again. Paths are relative to the folder specfleet runs in, and every
  worker node must see the file at the same path (a shared filesystem, as for a model folder);
  a worker whose copy differs stops with an error.
- Training data. With `training_data.prompts` the `regenerate` job takes its questions from the
  file (each conversation up to its last user turn) and the target answers them
  (workers/data/regenerate.py). `answers: as_written` takes the file's assistant turns as the
  target's answers instead: the turns are located by rendering the conversation with the
  template up to and after each of them, and only their tokens are trained on.

Results of a prompts file with categories: experiments/results/prompts_file/README.md.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.labels import label_problem, shown

ROLES = ("system", "user", "assistant")
SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "model": "assistant",
}
OPENAI_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
SHAPES = ("conversations", "messages", "prompt")
FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet"}
UNCATEGORIZED = "uncategorized"  # the category of a record without one, when others have one


class PromptsError(ValueError):
    """A prompts file that cannot be read as conversations; the message names the file and record."""


@dataclass(frozen=True)
class Message:
    role: str  # system | user | assistant
    content: str


@dataclass(frozen=True)
class Conversation:
    messages: tuple[Message, ...]
    category: str | None = None

    def prompt_turns(self) -> tuple[tuple[Message, ...], str | None]:
        """(the turns up to and including the last user turn, the assistant's reply to it or None):
        what a served request looks like, and the reference answer an evaluation prompt may run into."""
        last = max(i for i, m in enumerate(self.messages) if m.role == "user")
        after = self.messages[last + 1] if last + 1 < len(self.messages) else None
        return self.messages[: last + 1], (after.content if after is not None and after.role == "assistant" else None)


def file_format(path: str | Path) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise PromptsError(f"prompts file {path}: unknown format {suffix or '(no suffix)'!r}; use {', '.join(FORMATS)}")
    return FORMATS[suffix]


def file_digest(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_conversations(path: str | Path, category_field: str | None = "category") -> list[Conversation]:
    """Every record of the file as a Conversation, in file order. Raises PromptsError."""
    path = Path(path).expanduser()
    fmt = file_format(path)
    try:
        found = path.is_file()
    except OSError as exc:  # a path the system refuses (too long)
        raise PromptsError(f"prompts file {shown(str(path))}: cannot read it: {exc.strerror or exc}") from None
    if not found:
        raise PromptsError(f"prompts file {path}: not found")
    out = [_conversation(rec, category_field, f"prompts file {path}, {where}") for where, rec in _records(path, fmt)]
    if not out:
        raise PromptsError(f"prompts file {path}: no records")
    if category_field is not None and any(c.category is not None for c in out):
        out = [c if c.category is not None else Conversation(c.messages, UNCATEGORIZED) for c in out]
    return out


def _records(path: Path, fmt: str):
    """(where, record) pairs: 'line N' in JSONL, 'record N' otherwise."""
    if fmt == "parquet":
        yield from _parquet_records(path)
        return
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PromptsError(f"prompts file {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if fmt == "jsonl":
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                yield f"line {n}", _json(line, f"prompts file {path}, line {n}")
        return
    data = _json(text, f"prompts file {path}")
    if not isinstance(data, list):
        raise PromptsError(f"prompts file {path}: a JSON file must hold a list of records, got {type(data).__name__}")
    for n, rec in enumerate(data, 1):
        yield f"record {n}", rec


def _json(text: str, where: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise PromptsError(f"{where}: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None


def _parquet_records(path: Path):
    try:
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        raise PromptsError(f"prompts file {path}: reading Parquet needs pyarrow (pip install pyarrow)") from None
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises its own error types for a damaged file
        raise PromptsError(f"prompts file {path}: not a readable Parquet file ({exc})") from None
    for n, rec in enumerate(table.to_pylist(), 1):
        yield f"record {n}", rec


def _conversation(rec, category_field: str | None, where: str) -> Conversation:
    if not isinstance(rec, dict):
        raise PromptsError(f"{where}: a record must be an object, got {type(rec).__name__}")
    shapes = [s for s in SHAPES if rec.get(s) is not None]
    if len(shapes) != 1:
        found = f"it has {' and '.join(shapes)}" if shapes else f"its fields are {', '.join(map(str, rec)) or 'none'}"
        raise PromptsError(f"{where}: a record needs exactly one of {', '.join(SHAPES)} ({found})")
    shape = shapes[0]
    if shape == "prompt":
        messages = [Message("user", _text(rec["prompt"], f"{where}: prompt"))]
        answers = [k for k in ("completion", "response") if rec.get(k) is not None]
        if len(answers) > 1:
            raise PromptsError(f"{where}: give the reference answer as completion or response, not both")
        if answers:
            messages.append(Message("assistant", _text(rec[answers[0]], f"{where}: {answers[0]}")))
    else:
        turns = rec[shape]
        if not isinstance(turns, list) or not turns:
            raise PromptsError(f"{where}: {shape} must be a non-empty list of turns")
        keys, roles = (
            (("from", "value"), SHAREGPT_ROLES) if shape == "conversations" else (("role", "content"), OPENAI_ROLES)
        )
        messages = [_message(turn, keys, roles, f"{where}: {shape}[{i}]") for i, turn in enumerate(turns)]
    _check_order(messages, where)
    category = None
    if category_field is not None and rec.get(category_field) is not None:
        category = rec[category_field]
        if not isinstance(category, str) or not category.strip():
            raise PromptsError(f"{where}: {category_field} must be a non-empty string, got {category!r}")
        category = category.strip()
        problem = label_problem(category)
        if problem:
            raise PromptsError(f"{where}: {category_field} {shown(category)} {problem}")
    return Conversation(tuple(messages), category)


def _message(turn, keys: tuple[str, str], roles: dict[str, str], where: str) -> Message:
    role_key, text_key = keys
    if not isinstance(turn, dict):
        raise PromptsError(f"{where}: a turn must be an object with {role_key} and {text_key}")
    role = turn.get(role_key)
    if role not in roles:
        raise PromptsError(f"{where}.{role_key}: {role!r} is not a chat role; use {', '.join(roles)}")
    return Message(roles[role], _text(turn.get(text_key), f"{where}.{text_key}"))


def _text(value, where: str) -> str:
    """A turn's text: a string, or OpenAI's list of parts where every part is text."""
    if isinstance(value, list):
        parts = []
        for part in value:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise PromptsError(f"{where}: only text parts are supported, got a {kind!r} part")
            parts.append(part["text"])
        value = "".join(parts)
    if not isinstance(value, str):
        raise PromptsError(f"{where}: must be text, got {type(value).__name__}")
    if not value.strip():
        raise PromptsError(f"{where}: empty text")
    return value


def _check_order(messages: list[Message], where: str) -> None:
    """System turns come first; then a user turn opens the conversation."""
    body = [m for m in messages if m.role != "system"]
    if any(m.role == "system" for m in messages[len(messages) - len(body) :]):
        raise PromptsError(f"{where}: a system turn must come before the others")
    if not body or body[0].role != "user":
        raise PromptsError(f"{where}: the conversation must have a user turn before any assistant turn")
