"""Seeded bugs in how a kernel carries NaN and +-Inf inputs (docs/contract.md, "Non-finite
inputs"), each caught by the ci suite's `nonfinite` case: one that masks (a non-finite
exact value comes out finite), one that spreads (a finite exact value comes out
non-finite), a quantizer whose amax skips NaN and a weight gradient that zeroes
non-finite dy."""

from __future__ import annotations

import numpy as np

from seeded_bugs.catch import Catch, seeded
from seeded_bugs.kernels import (
    QB,
    BlockwiseGmm,
    padded_blocks,
    quantize_1x128,
    quantizer_spec,
    spec,
    tgmm_f32,
    tgmm_spec,
)


class NanToNumOutput(BlockwiseGmm):
    """Masking: the epilogue applies nan_to_num to the output ("no NaN reaches the
    loss"), so an upstream NaN becomes 0 and an infinity the largest finite float32."""

    def cast(self, out, dtype):
        return np.nan_to_num(out).astype(dtype)


class TileAmaxEpilogue(BlockwiseGmm):
    """Spreading: a fused output-scaling epilogue takes one power-of-two scale per 128x128
    output tile from the tile's amax and stores (acc / s) * s, as kernels with an FP8 or
    ue8m0-scaled output do.  Exact for finite tiles (s is a power of two), but one NaN or
    Inf in the tile makes the amax, hence s, non-finite, and every element of the tile
    becomes NaN: finite neighbours in other rows of the tile are contaminated."""

    def cast(self, out, dtype):
        res = out.copy()
        with np.errstate(invalid="ignore", over="ignore"):
            for r in range(0, out.shape[0], QB):
                for c in range(0, out.shape[1], QB):
                    tile = out[r:r + QB, c:c + QB]
                    amax = np.max(np.abs(tile))
                    if amax == 0:
                        continue
                    # 2^e >= amax (frexp's exponent; NaN and Inf give a non-finite s)
                    s = np.float32(np.ldexp(1.0, np.frexp(amax)[1]) if np.isfinite(amax)
                                   else amax)
                    res[r:r + QB, c:c + QB] = (tile / s) * s
        return res.astype(dtype)


def quantize_nanmax_amax(x):
    """Masking quantizer: the block amax is np.nanmax (a "robust" amax that skips NaN), so
    a NaN block gets the finite scale of its other elements where the recipe's is NaN
    (its NaN values stay NaN: the multiply carries them)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return quantize_1x128(x, guard=True, amax_of=_nanmax_amax)


def _nanmax_amax(x):
    with np.errstate(invalid="ignore"):
        return np.nanmax(np.abs(padded_blocks(x)), axis=2)


def tgmm_finite_dy(lhs, dy, group_sizes, out_dtype=np.float32):
    """Masking weight gradient: non-finite output gradients are zeroed before the reduction
    ("skip tokens whose gradient overflowed"), so an Inf or NaN in dy never reaches dW,
    where the exact dW is +-Inf or NaN."""
    dy = np.asarray(dy, np.float32)
    return tgmm_f32(lhs, np.where(np.isfinite(dy), dy, np.float32(0)), group_sizes, out_dtype)


BUGS = seeded(
    (spec("bug-nan-to-num-output", NanToNumOutput()), Catch("ci", "finite")),
    (spec("bug-nan-spread-tile-amax-epilogue", TileAmaxEpilogue()), Catch("ci", "finite")),
    (quantizer_spec("bug-quantizer-nanmax-amax", quantize_nanmax_amax),
     Catch("ci", "quantizer_bit_exact")),
    (tgmm_spec("bug-tgmm-zeroed-nonfinite-dy", tgmm_finite_dy), Catch("ci", "finite")),
)
