"""The exact bf16 matmul on the CPU's integer dot products, where it has them.

The C kernels (`bf16_exact.h` has the exactness argument) split each row of a and each
column of b at its largest exponent: a = a1 + a2, b = b1 + b2, with a1, b1 the values
within `WINDOW` binades of their line's largest (8-bit significands shifted into
24-bit integers) and a2, b2 the rest, the residuals (few: a value 2^15 below its line's
largest is rare in real data).  They compute t1 = a1 b1 exactly from integer dot products
and round it once to the output format; where residuals reach, they add their terms
a2 b1 + a b2 to t1 exactly in an integer fixed point and round that once; the elements
with a term below that fixed point they leave NaN and count, for the caller's exact
fallback.  Two kernels, the same bits: AMX int8 tiles (`amx_bf16.c`: three int8 digits
a value) and, where the CPU has no AMX, AVX512-VNNI int16 dot products (`vnni_bf16.c`:
two int16 digits a value, Karatsuba).  `operand_lines` finds each line's exponent, its
residual count and the non-finite values (which the digits cannot carry),
`residual_lists` the residuals, `matmul` does the rest.

`STATUS` is the kernel that runs ("amx-int8" or "avx512-vnni"), else "off (<reason>)"
with each kernel's reason; `KERNELS` holds both, by name, with their libraries where they
run here.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numba
import numpy as np

from fp8check.references import amx, cbuild, vnni
from fp8check.references.casts import BF16
from fp8check.references.exact import precision_of

MAX_K = 1 << 14
"""The longest contraction the kernels hold: v below 2^60 in int64, and AMX's int32 tile
sums without wrapping (bf16_exact.h, amx_bf16.c)."""
_OUT_KINDS = {np.dtype(np.float64): 0, np.dtype(np.float32): 1, BF16: 2}


def bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    """lib with the signatures of the functions every kernel exports (bf16_exact.h:
    `fp8check_bf16_lines`, `fp8check_bf16_matmul`, their arguments int64) declared."""
    for fn, nargs, ret in (("lines", 9, ctypes.c_int64), ("matmul", 24, ctypes.c_int)):
        f = getattr(lib, f"fp8check_bf16_{fn}")
        f.argtypes, f.restype = [ctypes.c_int64] * nargs, ret
    return lib


def _load(name: str, source: str, flags: tuple[str, ...], needs: tuple[str, ...],
          switch: str) -> tuple[ctypes.CDLL | None, str]:
    """(the kernel's library, "") where it runs here, else (None, why not)."""
    lib, why = cbuild.load(name, Path(__file__).with_name(source), flags, needs, switch)
    return (None if lib is None else bind(lib)), why


def _load_amx() -> tuple[ctypes.CDLL | None, str]:
    if not amx.AVAILABLE:  # its library asks Linux for the tile state this one uses
        return None, amx.STATUS.removeprefix("off (").removesuffix(")")
    return _load("amx-int8 bf16", "amx_bf16.c", amx.FLAGS, (), "FP8CHECK_AMX")


KERNELS: dict[str, tuple[ctypes.CDLL | None, str]] = {
    "amx-int8": _load_amx(),
    "avx512-vnni": _load("avx512-vnni bf16", "vnni_bf16.c", vnni.FLAGS, vnni.NEEDS,
                         "FP8CHECK_VNNI"),
}
"""Each kernel by name, fastest first: (its library where it runs here, else None; why
not, else "")."""
_RUNS = [name for name, (lib, _) in KERNELS.items() if lib is not None]
_LIB = KERNELS[_RUNS[0]][0] if _RUNS else None
STATUS = _RUNS[0] if _RUNS else "off (" + "; ".join(
    f"{name}: {why}" for name, (_, why) in KERNELS.items()) + ")"
AVAILABLE = _LIB is not None


@contextlib.contextmanager
def kernel(name: str | None) -> Iterator[None]:
    """Within: exact_matmul's integer path runs kernel `name` (a key of `KERNELS`), or is
    off (None: the split paths run, as on a CPU with neither); ValueError if `name` does
    not run here."""
    global _LIB, AVAILABLE, STATUS
    if name is not None and (name not in KERNELS or KERNELS[name][0] is None):
        why = KERNELS[name][1] if name in KERNELS else f"not one of {list(KERNELS)}"
        raise ValueError(f"the {name} kernel cannot run here: {why}")
    saved = _LIB, AVAILABLE, STATUS
    _LIB = None if name is None else KERNELS[name][0]
    AVAILABLE, STATUS = _LIB is not None, name or "off (switched off)"
    try:
        yield
    finally:
        _LIB, AVAILABLE, STATUS = saved


def _lib() -> ctypes.CDLL:
    if _LIB is None:
        raise RuntimeError(f"the integer bf16 path is {STATUS}")
    return _LIB


WINDOW = 15
"""D: the binades below its line's largest exponent that a value may lie and still be in
a1 / b1 (bf16_exact.h: |X| < 2^23, what three int8 digits (amx_bf16.c) or two
balanced int16 digits (vnni_bf16.c) hold)."""


def _strides(x: np.ndarray) -> tuple[np.ndarray, int, int]:
    """(x or a C-ordered copy, its element strides along its two axes): non-negative, one
    of them 1 (the kernel reads a line or the lines side by side)."""
    if any(s < 0 for s in x.strides) or x.itemsize not in x.strides:
        x = np.ascontiguousarray(x)
    return x, x.strides[0] // x.itemsize, x.strides[1] // x.itemsize


def _shares(count: int, unit: int = 16) -> list[tuple[int, int]]:
    """`count` items cut into numba's thread count of ranges, each a multiple of `unit`."""
    parts = numba.get_num_threads()
    step = -(-count // (parts * unit)) * unit
    return [(s, min(count, s + step)) for s in range(0, count, step)]


def _line_calls(x: np.ndarray, s0: int, s1: int, axis: int,
                d: int) -> tuple[list, np.ndarray, np.ndarray]:
    """The kernel calls that find `operand_lines`' results for the rows (axis=1; the
    columns with axis=0) of x with element strides s0, s1 (`_strides`; the caller holds x
    until the calls are done), and the arrays they fill."""
    s_line, s_t = (s0, s1) if axis == 1 else (s1, s0)
    count, length = x.shape[1 - axis], x.shape[axis]
    e = np.empty(count, np.int32)
    res = np.empty(count, np.int64)
    fn = _lib().fp8check_bf16_lines
    return ([(fn, (x.ctypes.data, s_line, s_t, l0, l1, length, d, e.ctypes.data,
                   res.ctypes.data)) for l0, l1 in _shares(count)], e, res)


def _in_turn(*calls: tuple[Callable[..., Any], tuple]) -> int:
    """C calls (function, arguments) one after another -> -1 when one returned -1 (it
    could not allocate its scratch), else the sum of their results."""
    done = [fn(*args) for fn, args in calls]
    return -1 if -1 in done else sum(done)


def _one_round(shares: Sequence[Sequence[tuple[Callable[..., Any], tuple]]]) -> int:
    """Lists of C calls, each a problem's cut into shares (`_shares`), in one round of the
    thread pool: thread t makes the t-th call of every list in turn -> the sum of all
    their results (MemoryError when one could not allocate its scratch).  One round for
    all the problems: a round costs tens of microseconds, more on a loaded machine, and
    waits on its slowest thread, and tgmm and dgrad make a problem per group."""
    return sum(cbuild.run_parallel([(_in_turn, tuple(c for c in calls if c is not None))
                                    for calls in itertools.zip_longest(*shares)]))


Lines = tuple[np.ndarray, np.ndarray]
"""One operand's lines: their exponents E and residual counts (`operand_lines`)."""


def operand_lines(pairs: Sequence[tuple[np.ndarray, np.ndarray]],
                  d: int) -> list[tuple[Lines, Lines, bool]]:
    """For each pair of bf16 a [m, k] and b [k, n]: the rows of a and the columns of b as
    lines -> (per operand (E int32, the largest exponent field of each line (at least 1),
    residuals int64, the values more than d binades below it, per line), whether every
    value of both is finite).  All the pairs in one round of the thread pool
    (`_one_round`): a thread's share of every a's lines and of every b's."""
    shares, found, held = [], [], []
    for a, b in pairs:
        (a, a0, a1), (b, b0, b1) = _strides(a), _strides(b)
        (ca, ea, ra), (cb, eb, rb) = _line_calls(a, a0, a1, 1, d), _line_calls(b, b0, b1, 0, d)
        shares += [ca, cb]
        found.append(((ea, ra), (eb, rb)))
        held += [a, b]  # the calls read them
    # The kernels count the lines holding a non-finite value (their E is 255): with none
    # in all the pairs, no pair's E need be looked at.
    any_bad = _one_round(shares) > 0
    return [(la, lb, not any_bad or bool((la[0] != 255).all() and (lb[0] != 255).all()))
            for la, lb in found]


def residual_lists(x: np.ndarray, axis: int, e: np.ndarray, res: np.ndarray,
                   d: int) -> tuple[np.ndarray, np.ndarray]:
    """The residuals of bf16 x [m, k] per row (axis=1; per column with axis=0), whose
    exponents e and counts res `operand_lines` gave -> (ptr, t) int64: line l's at
    positions t[ptr[l]:ptr[l + 1]], in order."""
    ptr = np.zeros(res.size + 1, np.int64)
    np.cumsum(res, out=ptr[1:])
    at = np.flatnonzero(res)
    sub = x[at] if axis == 1 else x[:, at].T
    bits = sub.view(np.uint16).astype(np.int32)
    mask = ((bits & 0x7FFF) != 0) & (e[at, None] - np.maximum((bits >> 7) & 0xFF, 1) > d)
    return ptr, np.nonzero(mask)[1].astype(np.int64)


Problem = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray], np.ndarray]
"""One product for `matmul`: (a, ea, b, eb, a's residuals by row, b's by column, out)."""


def matmul(problems: Sequence[Problem], d: int) -> list[np.ndarray]:
    """Each problem's a @ b exactly rounded into its out (C-contiguous [m, n], float64,
    float32 or bfloat16) for finite bf16 a [m, k], b [k, n] (k <= MAX_K) with row
    exponents ea and column exponents eb (`operand_lines`) at window d, and their
    residuals by row and by column (`residual_lists`) -> per problem, the count per row
    [m] of the elements left NaN (a term below the kernel's fixed point), for the caller
    to sum exactly.  The larger of each problem's m and n is cut among numba's threads,
    all the problems in one round of the thread pool (`_one_round`)."""
    shares, flags, held = [], [], []
    for a, ea, b, eb, rows, cols, out in problems:
        m, k = a.shape
        n = b.shape[1]
        a, ai, at = _strides(a)
        b, bt, bj = _strides(b)
        held += [a, b]  # the calls read them
        p, emin = precision_of(out.dtype)
        flagged = np.zeros(m, np.int64)
        nt = -(-n // 16)
        cuts = [(r0, r1, 0, nt) for r0, r1 in _shares(m)] if m >= n else [
            (0, m, c0, c1) for c0, c1 in _shares(nt, 1)]
        fn = _lib().fp8check_bf16_matmul
        shares.append([(fn, (a.ctypes.data, ai, at, ea.ctypes.data, b.ctypes.data, bt, bj,
                             eb.ctypes.data, k, n, d, r0, r1, c0, c1, out.ctypes.data,
                             _OUT_KINDS[out.dtype], p, emin, rows[0].ctypes.data,
                             rows[1].ctypes.data, cols[0].ctypes.data, cols[1].ctypes.data,
                             flagged.ctypes.data))
                       for r0, r1, c0, c1 in cuts])
        flags.append(flagged)
    _one_round(shares)
    return flags
