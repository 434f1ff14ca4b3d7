"""`assert_inputs_unchanged`: call a kernel and assert that it wrote into none of its
arguments, as the gate checks after every call (`fp8check.measures.integrity`)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from fp8check.measures.integrity import INPUTS_UNCHANGED, describe, watched_call


def _names(fn: Callable[..., Any], n_positional: int, keywords: list[str]) -> list[str]:
    """The names of `fn`'s first `n_positional` arguments (its parameters', else
    "argument i"), then `keywords`."""
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):  # no readable signature (some C extensions)
        params = []
    return [params[i] if i < len(params) else f"argument {i}"
            for i in range(n_positional)] + keywords


def assert_inputs_unchanged(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Call `fn(*args, **kwargs)` and return its result, asserting that every array
    argument (numpy, torch on any device, jax: `fp8check.measures.integrity`) has after the call
    the bits it had before, NaN payloads included.

    Raises:
      AssertionError: naming each argument written (by `fn`'s parameter names) and how
        many of its elements changed.  A kernel that needs scratch space allocates its own.
    """
    __tracebackhide__ = True
    n = len(args)

    def call(*values: Any) -> Any:
        return fn(*values[:n], **dict(zip(kwargs, values[n:], strict=True)))

    out, found = watched_call(call, [*args, *kwargs.values()],
                              _names(fn, n, list(kwargs)))
    if found:
        who = getattr(fn, "__qualname__", type(fn).__name__)
        raise AssertionError(f"fp8check: {INPUTS_UNCHANGED} failed: {who} wrote into its "
                             f"inputs: {describe(found)}")
    return out
