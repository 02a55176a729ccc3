"""Errors that reach the user as one clear line each (no traceback)."""

from __future__ import annotations


class UserError(Exception):
    """A problem with the user's input or environment; the CLI prints it and exits non-zero."""

    exit_code = 1


class SpecError(UserError):
    """Every validation problem of one spec file, reported together."""

    exit_code = 2

    def __init__(self, source: str, messages: list[str]):
        self.source = source
        # one line each, whatever characters the spec's keys and values held
        self.messages = [m.replace("\r", "\\r").replace("\n", "\\n") for m in messages]
        super().__init__(f"{source}: {len(messages)} error(s)\n" + "\n".join(self.messages))


class ResourceError(UserError):
    """The spec asks the cluster for resources it does not have."""

    exit_code = 3
