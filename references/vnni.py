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
    lib.fp8check_vnni_pack_rhs.argtypes = [_P, _I, _I, _I, _I, _P]
    lib.fp8check_vnni_pack_rhs.restype = None
    lib.fp8check_vnni_gmm.argtypes = [_P, _I, _I, _P, _I, _P, _I, _I, _I, _P, _P, _I, _I, _P,
                                      _I, _P]
    lib.fp8check_vnni_gmm.restype = None
    return lib, "avx512-vnni"


_LIB, STATUS = _load()
AVAILABLE = _LIB is not None
_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:  # ctypes drops the GIL during the calls: the threads run in parallel
        _POOL = ThreadPoolExecutor(numba.config.NUMBA_NUM_THREADS)
    return _POOL


def _forget_pool() -> None:
    global _POOL
    _POOL = None  # a forked child has none of the parent's threads: it starts its own


os.register_at_fork(after_in_child=_forget_pool)


def pack_rhs(codes: np.ndarray) -> np.ndarray:
    """One expert's rhs e4m3fn codes [K, N] uint8 (K a multiple of 128) -> its packed
    digits [K/128, ceil(N/16), 64, 3, 16, 2] int16 (the layout in `vnni_gmm.c`: element
    [kb, v, p, d, c, j] is digit d (h, l, h + l) of codes[128 kb + 2 p + j, 16 v + c],
    zero past N).  `gmm` packs each thread's columns itself; this is for inspection."""
    k, n = codes.shape
    nv = -(-n // 16)
    out = np.empty((k // 128, nv, 64, 3, 16, 2), np.int16)
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    _LIB.fp8check_vnni_pack_rhs(codes.ctypes.data, k, n, 0, nv, out.ctypes.data)
    return out


def gmm(a_codes: np.ndarray, sa: np.ndarray, b_codes: np.ndarray, sb: np.ndarray,
        offsets: np.ndarray, recipe: str, out: np.ndarray) -> None:
    """The recipe's float32 output of every group into out [M, N] (float32, C-contiguous;
    rows outside the groups are left alone): lhs codes [M, K] uint8 and scales sa
    [M, K/128], rhs codes [G, K, N] uint8 and scales sb [G, K/128, ceil(N/128)] float32,
    offsets [G + 1] (first row of each group, end of the last).  No NaN codes (the digits
    cannot carry them).  Column vectors are split over numba's thread count."""
    m, k = a_codes.shape
    g, _, n = b_codes.shape
    nv = -(-n // 16)
    a_codes = np.ascontiguousarray(a_codes, dtype=np.uint8)
    b_codes = np.ascontiguousarray(b_codes, dtype=np.uint8)
    sa = np.ascontiguousarray(sa, dtype=np.float32)
    sb = np.ascontiguousarray(sb, dtype=np.float32)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if out.dtype != np.float32 or out.shape != (m, n) or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous float32 {(m, n)}")
    threads = max(1, min(numba.get_num_threads(), nv))
    cuts = np.linspace(0, nv, threads + 1).astype(np.int64)
    scratch = [np.empty((k // 128) * int(cuts[i + 1] - cuts[i]) * _VEC_I16, np.int16)
               for i in range(threads)]
    jobs = [_pool().submit(_LIB.fp8check_vnni_gmm, a_codes.ctypes.data, k, k,
                           b_codes.ctypes.data, n, offsets.ctypes.data, g, int(cuts[i]),
                           int(cuts[i + 1]), sa.ctypes.data, sb.ctypes.data, sb.shape[2],
                           RECIPE_CODES[recipe], out.ctypes.data, n, scratch[i].ctypes.data)
            for i in range(threads)]
    for job in jobs:
        job.result()
