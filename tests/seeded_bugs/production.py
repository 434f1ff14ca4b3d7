"""Seeded bugs that only production shapes (the `full` suite's M = 65536 cases) reach.

`VectorisedGmm` is a correct gmm-fp8 kernel at production speed: the `deepgemm` recipe
of `fp8check.references.gmm` (per 128-wide K block a float32 partial, acc = fma(RN(sa*sb),
P, acc), an RNE cast), whole groups at a time.  `BlockwiseGmm`'s Python loop over tiles
and K blocks takes minutes on one production case; the bug below needs only the row
bookkeeping of a tiled kernel, which this class models with one vectorised mask.
"""

from __future__ import annotations

import numpy as np

from fp8check.references import gmm
from fp8check.references.quant import QTensor
from seeded_bugs.catch import Catch, named, seeded
from seeded_bugs.kernels import BlockwiseGmm, spec


class VectorisedGmm(BlockwiseGmm):
    """Correct: the deepgemm recipe over every group at once; `rows_written` says which
    output rows the kernel's row-to-group bookkeeping reaches (all compared rows here)."""

    def __call__(self, lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype=np.float32):
        gs = np.asarray(group_sizes)
        lq = QTensor(lhs_q, lhs_scale, (1, 128), "e4m3fn", "deepgemm")
        rq = QTensor(rhs_q, rhs_scale, (128, 128), "e4m3fn", "deepgemm")
        out = gmm(lq, rq, gs, out_dtype=np.dtype(out_dtype), accum="deepgemm")
        # rows no tile reaches stay as the zero-initialised output buffer has them
        out[~self.rows_written(gs, lhs_q.shape[0])] = 0
        return out

    def rows_written(self, gs: np.ndarray, m: int) -> np.ndarray:
        """bool[m]: the rows some group's tiles store (every row of every group)."""
        written = np.zeros(m, bool)
        written[: int(gs.sum())] = True
        return written


class Int16GroupOffsets(VectorisedGmm):
    """Group offsets and tile row indices kept in int16, as a kernel's metadata might be
    packed: past row 32767 both wrap to negative values.  A row belongs to the group with
    start <= row < end, compared in int16; for the group whose rows straddle 32768 its
    start is positive and its end has wrapped negative, so no row satisfies the test and
    the whole group is never written (the groups wholly past 32768 wrap consistently and
    stay right).  Invisible for M <= 32767."""

    def rows_written(self, gs: np.ndarray, m: int) -> np.ndarray:
        ends = np.cumsum(gs).astype(np.int16)  # wraps modulo 2^16
        starts = (ends - gs.astype(np.int16)).astype(np.int16)
        rows = np.arange(m).astype(np.int16)
        written = np.zeros(m, bool)
        for s, e in zip(starts, ends, strict=True):
            written |= (s <= rows) & (rows < e)
        return written


CORRECT = named(spec("numpy-fp8-vectorised", VectorisedGmm(), accum="deepgemm"))

BUGS = seeded((spec("bug-int16-group-offsets", Int16GroupOffsets(), accum="deepgemm"),
               Catch("full", "bound_ratio")))

# Named for `fp8check gate --kernel tests/seeded_bugs/production.py:NAME`.
VECTORISED = CORRECT["numpy-fp8-vectorised"]
INT16_GROUP_OFFSETS = BUGS["bug-int16-group-offsets"].spec
