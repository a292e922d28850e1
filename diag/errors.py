"""Exit codes and the one error type the CLI turns into a one-line message."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_OPERATIONAL = 3
EXIT_FIX_FAILED = 4
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: stdout closed early (`diag ... | head`), as a shell says
EXIT_INTERNAL = 70  # a bug in diag itself (EX_SOFTWARE); the message says to re-run with -v


ECHO_CHARS = 80  # a user's input echoed in a message: at most this many characters


def clip(text: object, limit: int = ECHO_CHARS) -> str:
    """A user's input as a message echoes it: cut to `limit` characters with "…" (a 100,000-
    character option is never printed back whole)."""
    s = str(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def one_line(text: object) -> str:
    """`text` with every run of whitespace (newlines, a server's CR LF) made one space: a
    message from a library or a server is one line on stderr and in a finding."""
    return " ".join(str(text).split())


def echo(value: object) -> str:
    """`repr(value)` for a message, cut (`clip`)."""
    return clip(repr(value))


class DiagError(Exception):
    """An expected failure: printed as one line on stderr, exits with `exit_code`."""

    exit_code = EXIT_OPERATIONAL

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class TargetError(DiagError):
    """The SGLang under diagnosis could not be found, fetched or recognised."""


class ServerError(DiagError):
    """A live SGLang server could not be reached or answered nonsense."""


class FixError(DiagError):
    """A fix could not be applied, reverted or verified."""

    exit_code = EXIT_FIX_FAILED
