"""Calling a kernel under test: `out_dtype=` where its signature takes it, its arguments
converted into its framework and its result back to numpy, and the arguments it wrote
into (`fp8check.measures.integrity`)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fp8check.contracts.frameworks import array_or_as_is, framework_dtype, to_framework
from fp8check.contracts.spec import KernelSpec
from fp8check.contracts.table import contract_of
from fp8check.measures import integrity
from fp8check.measures.integrity import InputChange


def takes_out_dtype(fn: Callable[..., Any]) -> bool:
    """Whether a matmul kernel `fn` is called with `out_dtype=`: its signature has a
    parameter `out_dtype` that can be passed by keyword, or a **kwargs.  A callable whose
    signature cannot be read (some C extensions, an object whose `__signature__` raises)
    is called without it."""
    try:
        params = inspect.signature(fn).parameters.values()
    except Exception:  # reading a user's object may run its code
        return False
    return any(p.kind is p.VAR_KEYWORD or (p.name == "out_dtype" and p.kind in (
        p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)) for p in params)


def out_dtype_kwargs(spec: KernelSpec, out_dtype: str | None) -> dict[str, Any]:
    """The keywords a call of `spec.fn` passes for `out_dtype`: `out_dtype=<framework
    dtype>` when one is asked for and the kernel takes it (`takes_out_dtype`), else none."""
    if out_dtype is not None and takes_out_dtype(spec.fn):
        return {"out_dtype": framework_dtype(spec.framework, out_dtype)}
    return {}


@dataclass(frozen=True)
class KernelCall:
    """One call of a kernel: its output (as `call_kernel` returns it) and the arguments
    it wrote into (`fp8check.measures.integrity`; empty when none)."""

    out: Any
    inputs_changed: tuple[InputChange, ...]


def run_kernel(spec: KernelSpec, args: Sequence[np.ndarray],
               out_dtype: str | None = None) -> KernelCall:
    """Call `spec.fn` on numpy `args` converted to its framework, with `out_dtype=` the
    framework's dtype named `out_dtype` when given and the kernel takes it
    (`takes_out_dtype`); arrays come back as numpy (a quantizer's (values, scales) as a
    tuple of them).  Whatever else the kernel returns comes back as it is.  After the call
    every argument handed is compared bit for bit with `args` (which the kernel cannot
    reach: `to_framework` copies), named as its contract names it (`Contract.args`).
    Exceptions from the kernel propagate."""
    contract = contract_of(spec.contract)
    fargs = [to_framework(a, spec.framework) for a in args]
    names = contract.arg_names
    if len(names) != len(args):
        names = tuple(f"argument {i}" for i in range(len(args)))
    out, changed = integrity.watched_call(
        spec.fn, fargs, names, out_dtype_kwargs(spec, out_dtype),
        before=[integrity.raw_bits(a, copy=False) for a in args])
    if not contract.matmul and isinstance(out, tuple | list):
        out = tuple(array_or_as_is(o) for o in out)
    else:
        out = array_or_as_is(out)
    return KernelCall(out, tuple(changed))


def call_kernel(spec: KernelSpec, args: Sequence[np.ndarray], out_dtype: str | None = None) -> Any:
    """`run_kernel(spec, args, out_dtype).out`: the output alone."""
    return run_kernel(spec, args, out_dtype).out
