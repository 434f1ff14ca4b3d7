"""Exact e4m3fn K-block partials on AMX int8 tiles, where the CPU has them.

The forward gmm reference needs, per 128-wide K block, the exact partial sum of products
of e4m3fn values (module docstring of `references.gmm`).  Float64 BLAS gives it exactly;
on CPUs with AMX (Intel Sapphire Rapids and later) int8 tile matmuls give it too, faster:
`amx_partials.c` explains the digit split and why every step is exact.  The library is
built by `references.native` and registered with LLVM so that numba kernels call it by
name (`block_partials`, `lhs_planes`; cacheable like any other).

`STATUS` is "amx-int8" where this path runs, else "off (<reason>)": the CPU has no AMX
int8 or AVX512-VBMI, the compiler fails, Linux refuses the tile state, or FP8CHECK_AMX=0.
`references.gmm` says which path its partials take (`gmm.PARTIALS`); every path gives the
same bits, only the time differs.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import ml_dtypes
import numba
import numpy as np
from llvmlite import binding
from numba.core import types

from fp8check.references import native

_SOURCE = Path(__file__).with_name("amx_partials.c")
_FLAGS = ("-O3", "-mamx-tile", "-mamx-int8", "-mavx512f", "-mavx512dq", "-mavx512bw",
          "-mavx512vbmi")
_NEEDS = ("amx_int8", "amx_tile", "avx512vbmi", "avx512bw")
_SIGNATURES = {  # the C functions numba calls; every argument an int64 or a pointer as uint64
    "fp8check_amx_e4m3_partials": (types.uint64, types.int64, types.int64, types.int64,
                                   types.uint64, types.int64, types.int64, types.int64,
                                   types.uint64),
    "fp8check_e4m3_lhs_planes": (types.uint64, types.int64, types.int64, types.int64,
                                 types.uint64, types.uint64, types.int64),
    "fp8check_e4m3_rhs_tiles": (types.uint64, types.int64, types.int64, types.uint64,
                                types.uint64),
}

_partials, _lhs_planes, _rhs_tiles = (types.ExternalFunction(name, types.void(*sig))
                                      for name, sig in _SIGNATURES.items())


@numba.njit(cache=True)
def block_partials(planes, row0, nrows, tiles, ct0, nct, out):
    """RN32 of the exact partials of one K block into out [nrows, 16 nct] float32: rows [row0,
    row0 + nrows) (multiples of 16) of the lhs digit planes [3, rows, 128] int8 times
    column tiles [ct0, ct0 + nct) of the K block's rhs tiles [3, 2, N/16, 16, 64]
    (`rhs_tiles`), on AMX tiles.  C-contiguous arrays only."""
    _partials(planes.ctypes.data, planes.shape[1], row0, nrows, tiles.ctypes.data,
              tiles.shape[2], ct0, nct, out.ctypes.data)


@numba.njit(cache=True)
def lhs_planes(codes, table, planes):
    """Digit planes of lhs codes [rows, K] uint8 (C-contiguous) into planes [K/128, 3,
    plane_rows, 128] int8 (rows <= plane_rows; the other rows are left as they are);
    table = `TABLE`."""
    _lhs_planes(codes.ctypes.data, codes.shape[1], codes.shape[0], codes.shape[1],
                table.ctypes.data, planes.ctypes.data, planes.shape[2])


def _digits() -> np.ndarray:
    """[256, 3] int8: the three signed 7-bit digits of X = value * 2^9 for every e4m3fn
    code (NaN codes give zeros: callers take the BLAS path when a NaN is present)."""
    v = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    x = np.where(np.isnan(v), 0.0, v * 512).astype(np.int64)  # exact: multiples of 2^-9
    s, a = np.sign(x), np.abs(x)
    return np.stack([s * (a & 127), s * ((a >> 7) & 127), s * (a >> 14)], axis=1).astype(np.int8)


DIGITS = _digits()
TABLE = np.ascontiguousarray(DIGITS.T)  # [3, 256]: the C side's digit table


@numba.njit(cache=True)
def _fill_rhs_tiles(codes, table, out):
    _rhs_tiles(codes.ctypes.data, codes.shape[0], codes.shape[1], table.ctypes.data,
               out.ctypes.data)


def rhs_tiles(codes: np.ndarray) -> np.ndarray:
    """One expert's rhs codes [K, N] uint8 -> its digit tiles [KB, 3, 2, N/16, 16, 64] int8
    (tile [kb, d, kk, ct] element [k4, 4 col + t] = digit d of codes[128 kb + 64 kk + 4 k4
    + t, 16 ct + col]: the layout TDPBSSD reads, every tile contiguous)."""
    k, n = codes.shape
    out = np.empty((k // 128, 3, 2, n // 16, 16, 64), np.int8)
    _fill_rhs_tiles(np.ascontiguousarray(codes), TABLE, out)
    return out


def _load() -> str:
    lib, why = native.load("AMX", _SOURCE, _FLAGS, _NEEDS, "FP8CHECK_AMX")
    if lib is None:
        return f"off ({why})"
    if lib.fp8check_amx_init() != 0:
        return "off (Linux refused the AMX tile state)"
    _register({name: getattr(lib, name) for name in _SIGNATURES})
    _KEEP_ALIVE.append(lib)
    return "amx-int8"


def _register(functions: dict) -> None:
    for name, fn in functions.items():
        binding.add_symbol(name, ctypes.cast(fn, ctypes.c_void_p).value)


_KEEP_ALIVE: list = []  # the loaded library, or the stubs: their addresses are registered
STATUS = _load()
AVAILABLE = STATUS == "amx-int8"
if not AVAILABLE:  # numba links the symbols even where they are never called
    _KEEP_ALIVE.extend(ctypes.CFUNCTYPE(None, *(ctypes.c_int64,) * len(sig))(lambda *a: None)
                       for sig in _SIGNATURES.values())
    _register(dict(zip(_SIGNATURES, _KEEP_ALIVE, strict=True)))
