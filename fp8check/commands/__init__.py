"""Sub-commands beyond `gate` and `list`, discovered at start-up.

Each module here exposes `register(subparsers) -> None`, which adds its parser and sets
`func=<callable(args) -> int exit status>` with `set_defaults`.  Raising `ValueError` (or
the CLI's UsageError) from `func` is reported as one line with exit status 2.
"""

from __future__ import annotations

import importlib
import pkgutil


def register_all(subparsers) -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        importlib.import_module(f"{__name__}.{info.name}").register(subparsers)
