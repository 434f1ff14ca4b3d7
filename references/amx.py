"""The e4m3fn gmm recipes on AMX int8 tiles, where the CPU has them (Intel Sapphire
Rapids and later).

`amx_gmm.c` computes each 128-wide K block's exact partial from int8 tile products of
the values' three 7-bit digits (its header has the exactness argument), rounds it once to
float32 and applies the recipe (deepgemm, cublas or tokamax) with the hardware's
correctly rounded float32 operations, all in one pass; for the exact recipe it hands the
exact float64 partials over (`PATH.exact_partials`).  The same bits as the float64 BLAS
path of `references.gmm` (tests/test_partials_paths.py).

`STATUS` is "amx-int8" where this path runs, else "off (<reason>)": the CPU lacks AMX
int8 or AVX512-VBMI / BW / DQ / VL, the compiler fails, Linux refuses the tile state, or
FP8CHECK_AMX=0.  `references.gmm` says which path it takes (`gmm.PARTIALS`).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import ml_dtypes
import numpy as np

from fp8check.references.intdot import DigitPath
from fp8check.references.quant import BLOCK

# -ffp-contract=off: the recipes' multiplies and adds must not be fused behind our back.
# The same for every C kernel on these instructions (amx_gmm.c, amx_bf16.c: AMX;
# vnni_gmm.c, vnni_bf16.c: VNNI; `bf16_matmul`), and the CPU flags they need.
FLAGS = ("-O3", "-mamx-tile", "-mamx-int8", "-mavx512f", "-mavx512dq", "-mavx512bw",
         "-mavx512vl", "-mavx512vbmi", "-ffp-contract=off")
NEEDS = ("amx_int8", "amx_tile", "avx512f", "avx512dq", "avx512bw", "avx512vl",
         "avx512vbmi")


def _start(lib: ctypes.CDLL) -> str:
    return "" if lib.fp8check_amx_init() == 0 else "Linux refused the AMX tile state"


def _packed_shape(k: int, n: int) -> tuple[int, ...]:
    """[K/128, 3, 2, ceil(N/16), 16, 64] int8: tile [kb, d, kk, ct] element [k4, 4 col + t]
    is digit d of codes[128 kb + 64 kk + 4 k4 + t, 16 ct + col] (zero past N): the layout
    TDPBSSD reads, every tile contiguous."""
    return (k // BLOCK, 3, 2, -(-n // 16), 16, 64)


PATH = DigitPath("amx-int8", Path(__file__).with_name("amx_gmm.c"), FLAGS, NEEDS,
                 "FP8CHECK_AMX", "fp8check_amx", _packed_shape, np.int8, 6, _start)
STATUS = PATH.status
AVAILABLE = PATH.lib is not None


def _digits() -> np.ndarray:
    """[256, 3] int8: the three signed digits d_0 + d_1 2^7 + d_2 2^14 of X = value * 2^9
    for every e4m3fn code (NaN codes give zeros: callers take the BLAS path when a NaN is
    present); amx_gmm.c builds the same table."""
    v = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    x = np.where(np.isnan(v), 0.0, v * 512).astype(np.int64)  # exact: multiples of 2^-9
    s, a = np.sign(x), np.abs(x)
    return np.stack([s * (a & 127), s * ((a >> 7) & 127), s * (a >> 14)], axis=1).astype(np.int8)


DIGITS = _digits()
