"""The command line's error classes.  A `UsageError` is the user's bad usage or bad input
(exit status 2, one line); any other exception escaping a command is an internal error
(exit status 3, `fp8check.cli.main`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class UsageError(Exception):
    """Bad usage or bad input: reported as one line, exit status 2."""


@contextmanager
def usage_errors() -> Iterator[None]:
    """Inside, a ValueError is the user's bad input: re-raised as UsageError.  Wrap only
    the code that reads what the user gave (arguments, files, kernel targets), so that a
    ValueError from a bug elsewhere stays an internal error."""
    try:
        yield
    except ValueError as e:
        raise UsageError(str(e).splitlines()[0] if str(e) else type(e).__name__) from e
