"""Input integrity: a kernel under test must not write into the arrays it is handed.

After every call of a kernel (layer 1's `contracts.run_kernel`; the user's kernels inside
layers 2 and 3, `fp8check.layers.moe.user`; `fp8check.testing`) each argument is compared
with what was handed, as raw bits viewed as unsigned integers, so a changed NaN payload or
the sign of a zero counts; a changed shape or dtype, or an array the call deleted, counts
every element.  The objects compared are the very ones the kernel got, read after the
call, so a write is seen wherever the kernel made it:

* numpy: the array handed (a copy of fp8check's own, which the kernel cannot reach);
* torch: the tensor handed, read back with `.cpu()` from whatever device it is on now;
* jax: arrays are immutable in Python, but their buffers are not: a kernel can write one
  through DLPack (`torch.from_dlpack(x)`) or a foreign function that writes its operand
  without declaring the alias.  The array's buffer is read after the call through a fresh
  device copy (`jax.device_put(x, may_alias=False)`, not a host value numpy may have
  cached).  A traced value
  (under `jax.jit` or a transformation's trace) has no buffer: it is not compared.

A kernel that needs scratch space allocates its own.  Cost per argument: one comparison,
plus one copy where the bits before the call must be saved (`snapshot`; layer 1 compares
with fp8check's own arrays instead, which the call cannot reach).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fp8check.results.model import Criterion

INPUTS_UNCHANGED = "inputs_unchanged"
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}  # bytes -> bits dtype


@dataclass(frozen=True)
class Bits:
    """An array's shape and raw bits: `flat` is [size] unsigned ints of its item size,
    or [size, itemsize] bytes for an item size without one."""

    shape: tuple[int, ...]
    flat: np.ndarray


@dataclass(frozen=True)
class InputChange:
    """Argument `name` changed in `changed` of its `size` elements (all of them when its
    shape or dtype changed or it could not be read after the call: `note` says which)."""

    name: str
    changed: int
    size: int
    note: str = ""

    def __str__(self) -> str:
        return f"{self.name} ({self.note or f'{self.changed} of {self.size} elements changed'})"


class InputsChanged(ValueError):
    """A kernel wrote into its inputs (layers 2 and 3, where a result's error says so)."""


def _numpy_bits(a: np.ndarray) -> Bits:
    """`a`'s bits (a C-contiguous array: a view of it, no copy)."""
    flat = a.reshape(-1)
    size = a.dtype.itemsize
    if size in _UINT:
        return Bits(tuple(a.shape), flat.view(_UINT[size]))
    return Bits(tuple(a.shape), flat.view(np.uint8).reshape(a.size, size))


def _torch_bits(t: Any, copy: bool) -> Bits:
    import torch

    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()  # a copy already
    elif copy:
        t = t.clone(memory_format=torch.contiguous_format)
    t = t.contiguous()
    if t.is_complex() or t.dtype == torch.bool:  # no integer view of these: raw bytes
        t = t.view(torch.uint8)
    elif t.element_size() > 1:
        t = t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    else:
        t = t.view(torch.uint8)
    return Bits(tuple(t.shape), t.numpy().reshape(-1).view(_UINT[t.element_size()]))


def raw_bits(x: Any, *, copy: bool) -> Bits | None:
    """The shape and raw bits of array `x` (numpy, torch or jax, module docstring); with
    `copy`, in memory of their own, which no later write into `x` can change.  None for
    what has no bits to compare (not an array; a traced jax value)."""
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(x, jax.Array):
        if isinstance(x, jax.core.Tracer):
            return None
        # a fresh device copy reads the buffer itself, not a host value numpy may cache,
        # and is memory of its own (nothing else holds it); `device_put` copies the buffer
        # as it is, where `x.copy()` would compile a copy program for each new shape
        return _numpy_bits(np.ascontiguousarray(jax.device_put(x, may_alias=False)))
    if type(x).__module__.startswith("torch") and hasattr(x, "detach"):
        return _torch_bits(x, copy)
    if isinstance(x, np.ndarray):
        return _numpy_bits(np.array(x, copy=True, order="C") if copy
                           else np.ascontiguousarray(x))
    return None


def _change(name: str, before: Bits, after: Any) -> InputChange | None:
    size = int(np.prod(before.shape, dtype=np.int64))
    try:
        now = raw_bits(after, copy=False)
    except Exception as e:  # a deleted jax array, a tensor whose storage was freed
        return InputChange(name, size, size, f"unreadable after the call: {type(e).__name__}")
    if now is None:
        return InputChange(name, size, size, "no longer an array after the call")
    if now.shape != before.shape or now.flat.shape != before.flat.shape:
        return InputChange(name, size, size, f"shape or dtype changed: {list(before.shape)} "
                                             f"became {list(now.shape)}")
    diff = now.flat != before.flat
    n = int(np.count_nonzero(diff if diff.ndim == 1 else diff.any(axis=1)))
    return InputChange(name, n, size) if n else None


def changes(names: Sequence[str], handed: Sequence[Any],
            before: Sequence[Bits | None]) -> list[InputChange]:
    """Each argument in `handed` (named by `names`) whose bits differ from `before` (its
    `raw_bits` before the call; None: not compared)."""
    out = []
    for name, obj, bits in zip(names, handed, before, strict=True):
        if bits is not None and (c := _change(name, bits, obj)) is not None:
            out.append(c)
    return out


def watched_call(fn: Callable[..., Any], args: Sequence[Any], names: Sequence[str],
                 kwargs: dict[str, Any] | None = None,
                 before: Sequence[Bits | None] | None = None) -> tuple[Any, list[InputChange]]:
    """(fn(*args, **kwargs), the arguments it changed).  `before`: the arguments' bits
    before the call where the caller has them in memory the call cannot reach (else a
    copy is taken here, `raw_bits(copy=True)`)."""
    if before is None:
        before = [raw_bits(a, copy=True) for a in args]
    out = fn(*args, **(kwargs or {}))
    return out, changes(names, args, before)


def describe(found: Sequence[InputChange]) -> str:
    """The changed arguments in words: "group_sizes (7 of 8 elements changed), ..."."""
    return ", ".join(str(c) for c in found)


def merged(*calls: Sequence[InputChange]) -> list[InputChange]:
    """The changes of several calls of one kernel, one per argument (its largest), in
    the order the arguments first changed."""
    by_name: dict[str, InputChange] = {}
    for found in calls:
        for c in found:
            if c.name not in by_name or c.changed > by_name[c.name].changed:
                by_name[c.name] = c
    return list(by_name.values())


def inputs_criterion(found: Sequence[InputChange]) -> Criterion:
    """The `inputs_unchanged` criterion: how many input elements the kernel changed, which
    must be 0; `bad_means` names each changed argument."""
    n = sum(c.changed for c in found)
    what = "input elements the kernel wrote"
    return Criterion.check(
        INPUTS_UNCHANGED, "correctness", n, "==", 0,
        meaning="input elements whose bits differ after the call from what was handed "
                "(a kernel must not write into its inputs)",
        n_bad=n, bad_means=f"{what}: {describe(found)}" if found else what)


def raise_if_changed(found: Sequence[InputChange], who: str) -> None:
    """InputsChanged naming `who` and each changed argument, if any changed."""
    if found:
        raise InputsChanged(f"{INPUTS_UNCHANGED} failed: {who} wrote into its inputs: "
                            f"{describe(found)}")
