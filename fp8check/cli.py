"""`fp8check`: the command line.  Sub-commands live in `fp8check.commands`.

Exit status: 0 success (every gate result passed); 1 a failed check (an accuracy
failure, a built-in kernel that failed to load); 2 bad usage or bad input (one line on
stderr, no traceback); 3 an internal error of fp8check (one line on stderr naming a file
that holds the traceback).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import traceback
from typing import NoReturn

from fp8check.commands import register_all
from fp8check.errors import UsageError

EXIT_USAGE = 2
EXIT_INTERNAL = 3


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fp8check", description="Numerical-accuracy gate for FP8 grouped-matmul "
                                             "kernels.")
    register_all(p.add_subparsers(dest="command", required=True))
    return p


def _internal_error(e: Exception) -> int:
    """Write the traceback to a file, say where in one line: exit 3."""
    with tempfile.NamedTemporaryFile("w", prefix="fp8check-traceback-", suffix=".txt",
                                     delete=False) as fh:
        traceback.print_exception(e, file=fh)
    first = str(e).splitlines()[0] if str(e) else ""
    print(f"fp8check: internal error: {type(e).__name__}: {first} (traceback in {fh.name})",
          file=sys.stderr)
    return EXIT_INTERNAL


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns its exit status (module docstring)."""
    try:
        args = parser().parse_args(argv)
        return int(args.func(args))
    except UsageError as e:
        print(f"fp8check: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # the reader went away (`fp8check list | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as e:  # a bug of fp8check, not the user's: never exit 0, 1 or 2
        return _internal_error(e)
