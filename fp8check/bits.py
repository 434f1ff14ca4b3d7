"""Bit-level float64 / float32 primitives for numba code (nopython, inlined).

* `bits_f64`, `f64_of_bits`, `bits_f32`: bitcasts (LLVM `bitcast`, so loops using them
  vectorize, unlike `view` on a scalar).
* `pow2(k)`: 2.0**k, exactly, for every k whose power float64 holds (-1074 <= k <= 1023),
  built from its bit pattern (normal or subnormal), no libm call.
* `exponent(x)`: floor(log2 |x|) of a normal float64, read from the exponent field.
* `F64_MAX`: the largest float64, for finiteness tests that vectorize.

Shared by the references (`references.exact`) and the elementwise metric cores
(`formats.ulp`, `metrics.bound_ratio`, `fp8check.measures.totals`).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

F64_MAX = float(np.finfo(np.float64).max)  # `not abs(x) <= F64_MAX`: x is NaN or inf


@intrinsic
def bits_f64(typingctx, x):
    """The int64 bit pattern of a float64."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int64))
    return types.int64(types.float64), codegen


@intrinsic
def f64_of_bits(typingctx, x):
    """The float64 with int64 bit pattern x."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))
    return types.float64(types.int64), codegen


@intrinsic
def bits_f32(typingctx, x):
    """The int32 bit pattern of a float32."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int32))
    return types.int32(types.float32), codegen


@numba.njit(cache=True, inline="always")
def pow2(k):
    """2.0**k for -1074 <= k <= 1023, exactly: the biased exponent field for a normal
    power, the single fraction bit 2^(k + 1074) for a subnormal one."""
    if k >= -1022:
        return f64_of_bits(np.int64(k + 1023) << 52)
    return f64_of_bits(np.int64(1) << (k + 1074))


@numba.njit(cache=True, inline="always")
def exponent(x):
    """floor(log2 |x|) for a normal float64 x; -1023 for zero and float64 subnormals
    (callers clamp it up to their format's emin, which is >= -1022)."""
    return ((bits_f64(x) >> 52) & 0x7FF) - 1023
