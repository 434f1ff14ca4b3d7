"""The exit status of every `fp8check` command: a contract CI relies on.

0: everything asked for ran and passed.  1: an accuracy failure or a kernel error (a
kernel that raised, crashed, exited or timed out; a built-in kernel that failed to load;
a run that made fewer results than planned or checked nothing: every result skipped).
2: bad usage or bad input (one line on stderr).  3: an internal error of fp8check (one
line naming a file that holds the traceback).  130 / 143: interrupted by SIGINT / SIGTERM
(128 + the signal's number; the gate writes what it has, marked incomplete).
"""

from __future__ import annotations

import signal

PASS = 0
FAIL = 1
USAGE = 2
INTERNAL = 3


def interrupted(signum: int) -> int:
    """The exit status of a run ended by signal `signum`: 128 + its number."""
    return 128 + signum


SIGINT_EXIT = interrupted(signal.SIGINT)  # 130
SIGTERM_EXIT = interrupted(signal.SIGTERM)  # 143

# The `--help` epilog of `fp8check` and `fp8check gate`.
HELP = f"""exit status:
  {PASS}    everything asked for ran and passed
  {FAIL}    an accuracy failure or a kernel error (raised, crashed, exited, timed out),
       a missing result, or nothing checked (every result skipped)
  {USAGE}    bad usage or bad input (one line on stderr)
  {INTERNAL}    internal error of fp8check (one line naming the traceback's file)
  {SIGINT_EXIT}  interrupted by SIGINT (the results so far are written, marked incomplete)
  {SIGTERM_EXIT}  interrupted by SIGTERM (the same)"""
