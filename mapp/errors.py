"""Errors a user can fix. Each carries what is wrong and what to do about it.

The library raises these; the CLI prints ``str(error)`` on one line and exits non-zero.
Anything else escaping to the CLI is a bug in mapp and keeps its traceback.
"""

from __future__ import annotations

__all__ = ["MappError", "InputError", "OutputError", "TraceFormatError", "LayoutError", "TransportError", "INTERRUPTED"]

INTERRUPTED = 130
"""Exit status after Ctrl-C: 128 + SIGINT, what shells report for a process stopped by it."""


class MappError(Exception):
    """Base of every user-facing error: ``message`` says what is wrong, ``hint`` what to do."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class InputError(MappError):
    """A path or argument the user gave does not point at usable input."""

    exit_code = 2


class TraceFormatError(MappError):
    """A trace file cannot be read as the format it claims (or was told) to be."""

    exit_code = 3


class LayoutError(MappError):
    """Ranks disagree with each other about world size, layout or identity."""

    exit_code = 3


class OutputError(MappError):
    """An output path cannot be written."""

    exit_code = 4


class TransportError(MappError):
    """A point-to-point transfer of ``mapp.transport`` cannot complete: the peer died or
    closed, the wait timed out, or the shared-memory segments could not be set up."""

    exit_code = 7
