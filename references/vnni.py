"""The e4m3fn gmm recipes on AVX512-VNNI int16 dot products, where the CPU has them.

`vnni_gmm.c` computes each 128-wide K block's exact partial from three int16 dot
products of the values' 9-bit digits (Karatsuba; its header has the exactness argument),
rounds it once to float32 and applies the recipe (deepgemm, cublas or tokamax) with the
hardware's correctly rounded float32 operations, all in one pass: the same bits as the
float64 BLAS path of `references.gmm`, in about half its time (`benchmarks/reference.py`).
CPUs with AVX512-VNNI: Intel Ice Lake / Sapphire Rapids and later, AMD Zen 4 and later.

`STATUS` is "avx512-vnni" where this path runs, else "off (<reason>)": the CPU lacks
AVX512-VNNI / BW / DQ, the compiler fails, or FP8CHECK_VNNI=0.
"""

from __future__ import annotations

import ctypes
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numba
import numpy as np

from fp8check.references import native

_SOURCE = Path(__file__).with_name("vnni_gmm.c")
# -ffp-contract=off: the recipes' multiplies and adds must not be fused behind our back.
_FLAGS = ("-O3", "-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl", "-mavx512vnni",
          "-ffp-contract=off")
_NEEDS = ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni")
_VEC_I16 = 64 * 3 * 32  # int16 of one packed rhs column vector of one K block
RECIPE_CODES = {"deepgemm": 0, "cublas": 1, "tokamax": 2}

_P, _I = ctypes.c_void_p, ctypes.c_int64


def _load() -> tuple[ctypes.CDLL | None, str]:
    lib, why = native.load("AVX512-VNNI", _SOURCE, _FLAGS, _NEEDS, "FP8CHECK_VNNI")
    if lib is None:
        return None, f"off ({why})"
    lib.fp8check_vnni_pack_rhs.argtypes = [_P, _I, _I, _P]
    lib.fp8check_vnni_pack_rhs.restype = None
    lib.fp8check_vnni_gmm.argtypes = [_P, _I, _I, _P, _I, _P, _I, _I, _I, _P, _P, _I, _I, _P,
                                      _I, _P]
    lib.fp8check_vnni_gmm.restype = None
    lib.fp8check_vnni_partials.argtypes = [_P, _I, _I, _I, _P, _I, _P, _I]
    lib.fp8check_vnni_partials.restype = None
    return lib, "avx512-vnni"


_LIB, STATUS = _load()
AVAILABLE = _LIB is not None
_POOL: ThreadPoolExecutor | None = None


def _lib() -> ctypes.CDLL:
    """The compiled library; raises RuntimeError where this path is off (see `AVAILABLE`)."""
    if _LIB is None:
        raise RuntimeError(f"the AVX512-VNNI path is {STATUS}")
    return _LIB


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:  # ctypes drops the GIL during the calls: the threads run in parallel
        # numba.config sets its NUMBA_* attributes at import, out of mypy's sight.
        _POOL = ThreadPoolExecutor(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    return _POOL


def _forget_pool() -> None:
    global _POOL
    _POOL = None  # a forked child has none of the parent's threads: it starts its own


os.register_at_fork(after_in_child=_forget_pool)


def pack_rhs(codes: np.ndarray) -> np.ndarray:
    """One expert's rhs e4m3fn codes [K, N] uint8 (K a multiple of 128) -> its packed
    digits [K/128, ceil(N/16), 64, 3, 16, 2] int16 (the layout in `vnni_gmm.c`: element
    [kb, v, p, d, c, j] is digit d (h, l, h + l) of codes[128 kb + 2 p + j, 16 v + c],
    zero past N).  `gmm` packs each group itself; this is for inspection."""
    k, n = codes.shape
    out = np.empty((k // 128, -(-n // 16), 64, 3, 16, 2), np.int16)
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    _lib().fp8check_vnni_pack_rhs(codes.ctypes.data, k, n, out.ctypes.data)
    return out


_ROWS = 8  # lhs rows per micro-kernel call (ROWS in vnni_gmm.c)


def row_shares(offsets: np.ndarray, parts: int) -> np.ndarray:
    """Boundaries [parts + 1] of `parts` contiguous row ranges of the groups (offsets
    [G + 1]) of about equal cost, each starting at one of a group's 8-row panels.  A panel
    costs 1 and packing a group's rhs about 1 more (measured: about the work of 8 rows of
    the same K and N), so many tiny groups split as evenly as one large one."""
    rows = np.diff(offsets)
    panels = -(-rows // _ROWS)
    first = np.repeat(np.cumsum(panels) - panels, panels)
    idx = np.arange(panels.sum()) - first  # panel index within its group
    start = np.repeat(offsets[:-1], panels) + _ROWS * idx
    cost = 1 + (idx == 0)
    before = np.cumsum(cost) - cost
    j = np.searchsorted(before, np.arange(parts + 1) * cost.sum() / parts)
    return np.append(start, offsets[-1])[j]


def gmm(a_codes: np.ndarray, sa: np.ndarray, b_codes: np.ndarray, sb: np.ndarray,
        offsets: np.ndarray, recipe: str, out: np.ndarray, parts: int | None = None) -> None:
    """The recipe's float32 output of every group into out [M, N] (float32, C-contiguous;
    rows outside the groups are left alone): lhs codes [M, K] uint8 and scales sa
    [M, K/128], rhs codes [G, K, N] uint8 and scales sb [G, K/128, ceil(N/128)] float32,
    offsets [G + 1] (first row of each group, end of the last).  No NaN codes (the digits
    cannot carry them).  The rows are cut into `parts` shares (`row_shares`; default
    numba's thread count) computed in parallel; the result does not depend on the cut."""
    m, k = a_codes.shape
    g, _, n = b_codes.shape
    a_codes = np.ascontiguousarray(a_codes, dtype=np.uint8)
    b_codes = np.ascontiguousarray(b_codes, dtype=np.uint8)
    sa = np.ascontiguousarray(sa, dtype=np.float32)
    sb = np.ascontiguousarray(sb, dtype=np.float32)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if out.dtype != np.float32 or out.shape != (m, n) or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous float32 {(m, n)}")
    cuts = row_shares(offsets, parts or numba.get_num_threads())
    shares = [(int(r0), int(r1)) for r0, r1 in zip(cuts[:-1], cuts[1:], strict=True) if r1 > r0]
    # One packed rhs group per share, referenced here until the jobs are done.
    scratch = [np.empty((k // 128) * -(-n // 16) * _VEC_I16, np.int16) for _ in shares]
    jobs = [_pool().submit(_lib().fp8check_vnni_gmm, a_codes.ctypes.data, k, k,
                           b_codes.ctypes.data, n, offsets.ctypes.data, g, r0, r1,
                           sa.ctypes.data, sb.ctypes.data, sb.shape[2], RECIPE_CODES[recipe],
                           out.ctypes.data, n, buf.ctypes.data)
            for (r0, r1), buf in zip(shares, scratch, strict=True)]
    for job in jobs:
        job.result()


def exact_partials(a_codes: np.ndarray, b_packed: np.ndarray, n: int,
                   parts: int | None = None, scratch: np.ndarray | None = None) -> np.ndarray:
    """The exact 128-wide K-block partials sum_k a[r, k] b[k, j] of lhs e4m3fn codes
    [m, K] (uint8, no NaN codes) and one expert's rhs packed by `pack_rhs` (N columns), in
    value units -> float64 [K/128, m, N] (each exact: `vnni_gmm.c`'s header), the rows cut
    into `parts` shares (`row_shares`) computed in parallel (default numba's thread
    count).  With `scratch` (flat float64, at least K/128 m N long) the result is a view
    of its front: a caller that reuses one buffer saves the page faults of a fresh one."""
    m, k = a_codes.shape
    a_codes = np.ascontiguousarray(a_codes, dtype=np.uint8)
    size = (k // 128) * m * n
    if scratch is not None and (scratch.dtype != np.float64 or scratch.ndim != 1
                                or scratch.size < size or not scratch.flags.c_contiguous):
        raise ValueError(f"scratch must be flat contiguous float64 of >= {size} elements")
    out = (np.empty(size) if scratch is None else scratch[:size]).reshape(k // 128, m, n)
    cuts = row_shares(np.array([0, m]), parts or numba.get_num_threads()).tolist()
    jobs = [_pool().submit(_lib().fp8check_vnni_partials, a_codes.ctypes.data + r0 * k, k,
                           r1 - r0, k, b_packed.ctypes.data, n,
                           out.ctypes.data + r0 * n * out.itemsize, m * n)
            for r0, r1 in zip(cuts[:-1], cuts[1:], strict=True) if r1 > r0]
    for job in jobs:
        job.result()
    return out
