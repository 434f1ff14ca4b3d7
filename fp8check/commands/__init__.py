"""The sub-commands of `fp8check`, one module each, discovered at start-up.

Each module exposes `register(subparsers) -> None`, which adds its parser and sets
`func=<callable(args) -> exit status>` with `set_defaults`.  A command raises
`fp8check.errors.UsageError` for bad usage or input (exit 2, one line; wrap the code that
reads the user's input in `fp8check.errors.usage_errors()`); anything else it raises is an
internal error (exit 3).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil


def register_all(subparsers: argparse._SubParsersAction) -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        importlib.import_module(f"{__name__}.{info.name}").register(subparsers)


def add_summary_args(p: argparse.ArgumentParser) -> None:
    """`--summary-md` and `--report-url`, the options of every command that finishes a run
    (gate, merge, compare)."""
    p.add_argument("--summary-md", metavar="FILE",
                   help="also write a short Markdown summary here (verdict, failures, "
                        "regressions, repro commands): e.g. $GITHUB_STEP_SUMMARY")
    p.add_argument("--report-url", metavar="URL",
                   help="where the summary links the full report (default: the --report "
                        "path), e.g. the CI artifact's URL")
