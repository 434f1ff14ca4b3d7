"""When a kernel declaring an accumulation recipe must match it bit for bit on given data.

The gate builds its `exact_partials` cases so that they are; on a user's data the asserts
decide it with `partials_exact_in_f32`."""

from __future__ import annotations

from typing import Any

import numpy as np

from fp8check.references.quant import BLOCK

F32_SIGNIFICAND_BITS = 24


def partials_exact_in_f32(lq: Any, rq: Any, group_sizes: np.ndarray) -> bool:
    """True when every 128-wide K partial sum of q_a * q_b is exact in float32 in *any*
    summation order, so a kernel declaring an accumulation recipe must match it bit for
    bit.  Sufficient condition, per (row, K block, column): every product is a multiple of
    2^(ta + tb) (ta, tb: the lowest set bit over the row's and column's nonzero block
    values), so every partial sum is too, and the sum of |products| is at most 2^24 such
    units.  The gate's `exact_partials` cases meet it by construction."""
    a = np.asarray(lq.values, np.float64)
    b = np.asarray(rq.values, np.float64)
    k = a.shape[1]
    if k % BLOCK:
        return False

    def lowest_bit(x: np.ndarray, axis: int) -> np.ndarray:
        # exponent of the lowest set bit of each nonzero value, min over the block axis
        mant, exp = np.frexp(x)
        ints = np.abs(mant * 2.0**53).astype(np.int64)
        with np.errstate(divide="ignore"):  # zeros: log2(0), replaced by inf
            low = np.where(ints != 0, np.log2(ints & -ints) + exp - 53, np.inf)
        return low.min(axis=axis)

    nkb = k // BLOCK
    ta = lowest_bit(a.reshape(a.shape[0], nkb, BLOCK), 2)  # [M, KB]
    tb = lowest_bit(b.reshape(b.shape[0], nkb, BLOCK, b.shape[2]), 2)  # [G, KB, N]
    start = 0
    for g, size in enumerate(group_sizes.tolist()):
        rows = slice(start, start + size)
        start += size
        for kb in range(nkb):
            cols = slice(kb * BLOCK, (kb + 1) * BLOCK)
            total = np.abs(a[rows, cols]) @ np.abs(b[g, cols])  # exact enough: compared
            unit = ta[rows, kb][:, None] + tb[g, kb][None, :]  # with a power of two
            with np.errstate(invalid="ignore"):
                ok = (total == 0) | (np.log2(np.maximum(total, 1e-300)) - unit
                                     <= F32_SIGNIFICAND_BITS - 1e-9)
            if not ok.all():
                return False
    return True
