"""The e4m3fn gmm recipes on AVX512-VNNI int16 dot products, where the CPU has them.

`vnni_gmm.c` computes each 128-wide K block's exact partial for the recipes (deepgemm,
cublas, tokamax) from one int16 dot product a value pair: each lhs row's and rhs
column's 128 values windowed at their largest exponent (11 and 13 bits), the few values
far below it adding their exact remainders one by one in float64; it rounds the partial
once to float32 and applies the recipe with the hardware's correctly rounded float32
operations, all in one pass; the production check's pass (`references.forward_refs`) is
the same loop with a second dot product a pair on the magnitudes' windowed digits.  For
the exact recipe it forms the partials from three int16 dot products of the values' 9-bit
digits (Karatsuba) and hands them over (`PATH.exact_partials`).  The C file's header has
both exactness arguments.
The same bits as the float64 BLAS path of `references.gmm` (tests/test_partials_paths.py);
the path where the CPU has AVX512-VNNI but no AMX (`references.amx`).
CPUs with AVX512-VNNI: Intel Ice Lake / Sapphire Rapids and later, AMD Zen 4 and later.

`STATUS` is "avx512-vnni" where this path runs, else "off (<reason>)": the CPU lacks
AVX512-VNNI / BW / DQ, the compiler fails, or FP8CHECK_VNNI=0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fp8check.references.intdot import DigitPath
from fp8check.references.quant import BLOCK

# -ffp-contract=off: the recipes' multiplies and adds must not be fused behind our back.
# The same for every C kernel on these instructions (amx_gmm.c, amx_bf16.c: AMX;
# vnni_gmm.c, vnni_bf16.c: VNNI; `bf16_matmul`), and the CPU flags they need.
FLAGS = ("-O3", "-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl", "-mavx512vnni",
         "-ffp-contract=off")
NEEDS = ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni")


def _packed_shape(k: int, n: int) -> tuple[int, ...]:
    """[K/128, ceil(N/16), 64, 3, 16, 2] int16: element [kb, v, p, d, c, j] is digit d (h,
    l, h + l) of codes[128 kb + 2 p + j, 16 v + c], zero past N."""
    return (k // BLOCK, -(-n // 16), 64, 3, 16, 2)


# The production pass keeps no lhs digits across its rows: it takes the rows sized by this
# as a bound and passes fewer where their running state (28 bytes an element) would pass
# vnni_gmm.c's PASS_STATE_BYTES.  That state in L2 or not measured the same: 2.96-3.00x
# the reference gmm at production wi with 24-row (L2) and 128-row passes.
PATH = DigitPath("avx512-vnni", Path(__file__).with_name("vnni_gmm.c"), FLAGS, NEEDS,
                 "FP8CHECK_VNNI", "fp8check_vnni", _packed_shape, np.int16, 3)
STATUS = PATH.status
AVAILABLE = PATH.lib is not None
