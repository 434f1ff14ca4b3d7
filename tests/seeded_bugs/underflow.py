"""Seeded bugs of float32 underflow: a kernel that flushes subnormals without declaring it.

`bug-ftz-accumulator` is `BlockwiseGmm` (the `deepgemm` recipe) whose float32 accumulator
is flushed to zero after every update where it falls below 2^-126, as a kernel compiled
with flush-to-zero (nvcc --use_fast_math / -ftz=true, XLA) behaves, while it declares
IEEE subnormals (framework numpy: flushes_subnormals False).  The gate's data only reaches
that range in the ci `subnormal` cases (`fp8check.inputs.subnormal`), where every valid order
is exact: there most outputs lie below 2^-126 and the flushed ones exceed the bound's
underflow term (K 2^-150) by orders of magnitude.
"""

from __future__ import annotations

import numpy as np

from seeded_bugs.catch import Catch, seeded
from seeded_bugs.kernels import BlockwiseGmm, spec

MIN_NORMAL = np.float32(2.0**-126)


def flush_subnormals(x: np.ndarray) -> np.ndarray:
    """x with every |value| < 2^-126 replaced by +0 (float32 FTZ of results)."""
    return np.where(np.abs(x) < MIN_NORMAL, np.float32(0), x).astype(np.float32)


class FtzAccumulator(BlockwiseGmm):
    """Bug: the accumulator flushes subnormal results to zero (undeclared FTZ)."""

    def accumulate(self, acc, s, p):
        return flush_subnormals(super().accumulate(acc, s, p))


BUGS = seeded((spec("bug-ftz-accumulator", FtzAccumulator()), Catch("ci", "bound_ratio")))
