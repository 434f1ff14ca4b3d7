"""Seeded bugs of the shapes and roundings the `ci` suite's odd K-block count, N tail
tile, bf16 rounding ties, quantizer rounding boundaries and quantizer-only partial blocks
exist to catch (issue 24).  Each fails `ci` on more than one case."""

from __future__ import annotations

import numpy as np

from seeded_bugs.catch import Catch, seeded
from seeded_bugs.kernels import (
    BF16,
    QB,
    BlockwiseGmm,
    block_amax,
    quantize_1x128,
    quantizer_spec,
    spec,
)

KSTEP = 2  # K blocks per step of the odd-K bug's loop (a 256-wide K tile)
TN = 256  # N tile of the N-tail bug


class OddKTail(BlockwiseGmm):
    """K loop in 256-wide steps (two quantization blocks per step, K // 256 steps): with
    an odd block count the last block is never accumulated."""

    def k_blocks(self, nkb):
        return [kb for step in range(nkb // KSTEP) for kb in range(step * KSTEP,
                                                                   (step + 1) * KSTEP)]


class NTailTile(BlockwiseGmm):
    """Grid over N // 256 output tiles (floor, not ceil): when N % 256 == 128 the last
    128 columns are never written and keep the zero-initialised output's zeros."""

    def __call__(self, lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype=np.float32):
        out = super().__call__(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype)
        out[:, out.shape[1] // TN * TN:] = 0
        return out


class HalfAwayBf16Cast(BlockwiseGmm):
    """Output rounding: float32 -> bf16 as (bits + 0x8000) >> 16 on the sign-magnitude
    bits, i.e. round half away from zero (the classic shortcut that forgets the
    ties-to-even term `+ ((bits >> 16) & 1)`)."""

    def cast(self, out, dtype):
        if dtype != BF16:
            return out.astype(dtype)
        bits = out.astype(np.float32).view(np.uint32)
        rounded = (bits + np.uint32(0x8000)) & np.uint32(0xFFFF0000)
        return rounded.view(np.float32).astype(BF16)  # exact: low 16 bits are zero


def quantize_dividing(x):
    """Quantizer bug: q = satfinite(x / s), a true division by the scale, instead of the
    recipe's x * RN(1/s) (they differ by one e4m3 step near rounding boundaries)."""
    return quantize_1x128(x, guard=True, divide=True)


def unmasked_tail_amax(x):
    """amax of every 1x128 block read from row-major memory without a mask: the partial
    last block of a row (K % 128 != 0) loads 128 elements, its missing ones from the
    start of the next row (the last row's from zeroed memory past the array)."""
    x = np.asarray(x, np.float32)
    m, k = x.shape
    amax = block_amax(x)
    if k % QB:
        flat = np.concatenate([x.reshape(-1), np.zeros(QB, np.float32)])
        start = np.arange(m) * k + k // QB * QB
        window = flat[start[:, None] + np.arange(QB)[None, :]]
        amax[:, -1] = np.max(np.abs(window), axis=1)
    return amax


def quantize_unmasked_tail(x):
    """Quantizer bug: the partial last block's amax takes in the next row's leading
    elements (`unmasked_tail_amax`), so its scale is too large whenever they are."""
    return quantize_1x128(x, guard=True, amax_of=unmasked_tail_amax)


BUGS = seeded(
    (spec("bug-odd-k-tail", OddKTail()), Catch("ci", "bound_ratio")),
    (spec("bug-n-tail-tile", NTailTile()), Catch("ci", "bound_ratio")),
    (spec("bug-half-away-bf16-cast", HalfAwayBf16Cast()), Catch("ci", "bias_z")),
    (quantizer_spec("bug-quantizer-divides", quantize_dividing),
     Catch("ci", "quantizer_bit_exact")),
    (quantizer_spec("bug-quantizer-partial-block", quantize_unmasked_tail),
     Catch("ci", "quantizer_bit_exact")),
)
