"""numba functions compiled once: `one_signature`.

numba compiles a function once per combination of its arguments' types, and an array's
memory layout (C, F, strided view) is part of its type: a kernel called with a transposed
operand here and a column slice there compiles again for each (8 times for one of the
exact matmul's kernels in a gate run, 1.5 s each, in every fresh process of a fresh clone,
its cache still empty).  Declared with layout-free ('A') arrays, one compilation takes
every layout.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numba


def one_signature(signature: str, **options: Any) -> Callable[[Callable], Callable]:
    """`numba.njit(cache=True, **options)` compiled for `signature` only (a numba signature
    string; arrays as "float64[:, :]", layout 'A', take any memory layout), at the first
    call rather than at import.  Arguments that do not convert to it raise TypeError."""
    def decorate(fn: Callable) -> Callable:
        dispatcher = numba.njit(cache=True, **options)(fn)

        @functools.wraps(fn)
        def call(*args: Any) -> Any:
            if not dispatcher.signatures:
                dispatcher.compile(signature)  # from the cache when it holds it
                dispatcher.disable_compile()
            return dispatcher(*args)
        return call
    return decorate
