"""`fp8check`: the command line.  Sub-commands live in `fp8check.commands`.

Exit status: `fp8check.exitcodes` (0 pass, 1 fail, 2 bad usage or input, 3 internal
error, 130/143 interrupted).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import traceback
from typing import NoReturn

from fp8check import exitcodes
from fp8check.commands import register_all
from fp8check.errors import Interrupted, UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fp8check", description="Numerical-accuracy gate for FP8 grouped-matmul "
                                             "kernels.", epilog=exitcodes.HELP,
                formatter_class=argparse.RawDescriptionHelpFormatter)
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
    return exitcodes.INTERNAL


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns its exit status (module docstring)."""
    try:
        args = parser().parse_args(argv)
        return int(args.func(args))
    except UsageError as e:
        print(f"fp8check: error: {e}", file=sys.stderr)
        return exitcodes.USAGE
    except (KeyboardInterrupt, Interrupted) as e:  # before or after a gate's run: no results
        signum = e.signum if isinstance(e, Interrupted) else signal.SIGINT
        print(f"fp8check: interrupted by {signal.Signals(signum).name}", file=sys.stderr)
        return exitcodes.interrupted(signum)
    except BrokenPipeError:  # the reader went away (`fp8check list | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exitcodes.FAIL
    except Exception as e:  # a bug of fp8check, not the user's: never exit 0, 1 or 2
        return _internal_error(e)
