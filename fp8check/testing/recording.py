"""What the asserts report to and under which name: the state the pytest plugin sets.

* listeners: `add_listener(fn)` makes every assertion call `fn(result)` with its
  `CaseResult`, passing or failing (the plugin's `--fp8check-report` collects them);
* the assertion scope: inside `assertion_context(label, gate_case)` results are labelled
  `label` (their report `kernel`: the pytest node id) and, with a `gate_case`, carry its
  case id and gate command; `current_label()` says whether a label is set;
* the failure directory: where failing inputs are saved (`failure_dir()`):
  `$FP8CHECK_FAILURE_DIR`, else the directory `set_failure_dir` named (the plugin: beside
  its report), else `<tmp>/fp8check-failures`.
"""

from __future__ import annotations

import contextvars
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fp8check.results import CaseResult

if TYPE_CHECKING:
    from fp8check.testing.gate_case import GateCase

FAILURE_DIR_ENV = "FP8CHECK_FAILURE_DIR"

Listener = Callable[[CaseResult], None]
_listeners: list[Listener] = []
_failure_dir: list[Path] = []  # at most one: set by the plugin; the env var wins


@dataclass
class AssertionScope:
    """Where assertions are being made: a label (the pytest node id), the active gate
    case, and how many assertions were made in it so far."""

    label: str | None = None
    gate_case: GateCase | None = None
    count: int = 0


_scope: contextvars.ContextVar[AssertionScope | None] = contextvars.ContextVar(
    "fp8check_testing_scope", default=None)


def add_listener(fn: Listener) -> None:
    """Call `fn(result)` for every assertion made from now on, passing or failing."""
    _listeners.append(fn)


def remove_listener(fn: Listener) -> None:
    """Stop calling `fn` (ValueError if it was not added)."""
    _listeners.remove(fn)


def notify(result: CaseResult) -> None:
    """Hand `result` to every listener, in the order they were added."""
    for fn in list(_listeners):
        fn(result)


@contextmanager
def assertion_context(label: str | None = None,
                      gate_case: GateCase | None = None) -> Iterator[AssertionScope]:
    """Results made inside are labelled `label` and, with a `gate_case`, carry its case id
    and gate command.  Scopes nest; the outer one is back on exit."""
    scope = AssertionScope(label=label, gate_case=gate_case)
    token = _scope.set(scope)
    try:
        yield scope
    finally:
        _scope.reset(token)


def current_scope() -> AssertionScope | None:
    """The innermost `assertion_context`, None outside any."""
    return _scope.get()


def current_label() -> str | None:
    """The label assertions are made under now (None: no labelled scope)."""
    scope = _scope.get()
    return scope.label if scope is not None else None


def begin_assertion() -> AssertionScope:
    """Count one more assertion in the current scope and return it (outside any scope: a
    fresh unlabelled one, counting this assertion only)."""
    scope = _scope.get() or AssertionScope()
    scope.count += 1
    return scope


def set_failure_dir(path: str | Path | None) -> None:
    """Save failing inputs under `path` (None: back to the default); the environment
    variable FP8CHECK_FAILURE_DIR overrides it."""
    _failure_dir.clear()
    if path is not None:
        _failure_dir.append(Path(path))


def failure_dir() -> Path:
    """The absolute directory failing inputs are saved in now."""
    if os.environ.get(FAILURE_DIR_ENV):
        where = Path(os.environ[FAILURE_DIR_ENV])
    elif _failure_dir:
        where = _failure_dir[0]
    else:
        where = Path(tempfile.gettempdir()) / "fp8check-failures"
    return Path(os.path.abspath(where))
