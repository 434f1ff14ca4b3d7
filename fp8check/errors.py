"""The command line's error classes.  A `UsageError` is the user's bad usage or bad input
(exit status 2, one line); an `Interrupted` is SIGINT or SIGTERM (exit status 128 + the
signal's number); any other exception escaping a command is an internal error (exit
status 3, `fp8check.cli.main`)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class UsageError(Exception):
    """Bad usage or bad input: reported as one line, exit status 2."""


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived (`signum`): a BaseException, so that no `except
    Exception` of a layer or a kernel wrapper swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


@contextmanager
def interrupts_raise() -> Iterator[None]:
    """Inside, SIGINT and SIGTERM raise `Interrupted` (in the main thread); the previous
    handlers are restored on the way out."""
    previous = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextmanager
def usage_errors() -> Iterator[None]:
    """Inside, a ValueError is the user's bad input: re-raised as UsageError.  Wrap only
    the code that reads what the user gave (arguments, files, kernel targets), so that a
    ValueError from a bug elsewhere stays an internal error."""
    try:
        yield
    except ValueError as e:
        raise UsageError(str(e).splitlines()[0] if str(e) else type(e).__name__) from e
