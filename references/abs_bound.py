"""|A||B| of blockwise FP8 gmm operands (the magnitude product error bounds scale with),
from the 128-wide K-block partials of the magnitudes, on the exact-partial paths of the
forward reference.

Definition (`abs_chunk`; every path gives these bits on e4m3fn operands):

    Q[kb, i, j] = sum over the K block kb of |a_ik| |b_kj|      (value units, float64)
    S_ij = (((0 + RN(Q[0] s_0)) + RN(Q[1] s_1)) + ...)          in K-block order, float64
    abs_ab_ij = RN(S_ij (1 + 2 (K + 2) 2^-53))

with s_kb = |sa[i, kb]| |sb[kb, j]| (two float32 scales: exact in float64).  On e4m3fn
operands Q is exact (every magnitude is a multiple of 2^-9 below 2^9, so the 128-term
sum is a multiple of 2^-18 below 2^43 units: `references.gmm`'s exactness argument on
non-negative values); it is computed on the integer-digit path of the signed partials
(`references.intdot`: AMX, else VNNI) on the codes with the sign bit cleared, else (no
such path, a NaN code) with float64 BLAS, the same values.  On e5m2 operands Q is float64
BLAS's block sum, within gamma_128 of the true one (non-negative terms: no cancellation).

It bounds the true product from above: the true value is sum_kb Q*_kb s_kb with Q* the
exact block sums; Q errs by at most gamma_128 relative (0 for e4m3fn), each product and
addition of S by u = 2^-53 relative, all downward at worst, so S >= (1 - gamma_(128 + KB))
|A||B| with KB = K / 128, and 1 + 2 (K + 2) u more than covers that and the last
multiplication's rounding for every K >= 128.  A NaN code or non-finite scale gives NaN
or Inf where it reaches, as IEEE arithmetic on the dequantized values would.
"""

from __future__ import annotations

import numba
import numpy as np

from fp8check.references.gmm import (
    _CHUNK_BYTES,
    _digit_path,
    _to_f64,
    check_group_sizes,
    group_offsets,
    has_nan_code,
)
from fp8check.references.intdot import DigitPath
from fp8check.references.quant import BLOCK, QTensor

_MAGNITUDE = np.uint8(0x7F)  # clears an fp8 code's sign bit: the code of its magnitude


def factor(k: int) -> float:
    """The bound's final scaling 1 + 2 (K + 2) 2^-53 (module docstring)."""
    return 1.0 + 2.0 * (k + 2) * 2.0**-53


@numba.njit(parallel=True, cache=True)
def _abs_sum(q, sa, sb, scale):
    """abs_ab of a chunk (module docstring): q [KB, m, N] the magnitude partials, sa
    [m, KB] and sb [KB, N] (rhs scales expanded over N) float32, scale the final factor ->
    float64 [m, N] (parallel over rows, each row's columns in the inner loop)."""
    kb_n, m, n = q.shape
    out = np.zeros((m, n))
    for i in numba.prange(m):
        row = out[i]
        for kb in range(kb_n):
            a = abs(np.float64(sa[i, kb]))
            for j in range(n):
                row[j] += q[kb, i, j] * (a * abs(np.float64(sb[kb, j])))
        for j in range(n):
            row[j] *= scale
    return out


class AbsRhs:
    """One expert's rhs magnitudes, prepared once for all its row chunks: packed for the
    digit path where it applies (e4m3fn, no NaN code), and their float64 image when a
    chunk needs it (made at most once)."""

    def __init__(self, values: np.ndarray, scales: np.ndarray, fmt: str,
                 path: DigitPath | None):
        """values [K, N] fp8, scales [K/128, ceil(N/128)] float32: one expert's."""
        codes = values.view(np.uint8)
        self.values, self.n = values, values.shape[1]
        self.path = path if fmt == "e4m3fn" and not has_nan_code(codes) else None
        self.packed = self.path.pack_rhs(codes & _MAGNITUDE) if self.path else None
        self.scales = np.ascontiguousarray(
            np.repeat(scales.astype(np.float32), BLOCK, axis=1)[:, :self.n])
        self._f64: np.ndarray | None = None

    def f64(self) -> np.ndarray:
        """|values| in float64 [K, N] (exact)."""
        if self._f64 is None:
            self._f64 = np.abs(_to_f64(self.values))
        return self._f64


def abs_chunk(a_values: np.ndarray, sa: np.ndarray, rhs: AbsRhs,
              scratch: np.ndarray | None = None) -> np.ndarray:
    """abs_ab (module docstring) of lhs rows a_values [m, K] (fp8) with scales sa
    [m, K/128] (float32) against one expert's prepared `rhs` -> float64 [m, N].
    `scratch`: as `DigitPath.exact_partials`'s (used on the digit path only)."""
    codes = a_values.view(np.uint8)
    if rhs.path is not None and rhs.packed is not None and not has_nan_code(codes):
        q = rhs.path.exact_partials(codes & _MAGNITUDE, rhs.packed, rhs.n, scratch=scratch)
    else:
        q = _blas_partials(np.abs(_to_f64(a_values)), rhs.f64())
    return _abs_sum(q, np.ascontiguousarray(sa, dtype=np.float32), rhs.scales,
                    factor(a_values.shape[1]))


def _blas_partials(a64: np.ndarray, b64: np.ndarray) -> np.ndarray:
    """[K/128, m, N]: float64 BLAS's 128-wide block sums of a64 [m, K] @ b64 [K, N]."""
    m, k = a64.shape
    q = np.empty((k // BLOCK, m, b64.shape[1]))
    for kb in range(k // BLOCK):
        blk = slice(BLOCK * kb, BLOCK * (kb + 1))
        np.matmul(a64[:, blk], b64[blk], out=q[kb])
    return q


def blockwise_abs_product(lhs: QTensor, rhs: QTensor, group_sizes) -> np.ndarray:
    """abs_ab [M, N] (module docstring) of lhs [M, K] (1x128 blocks) and rhs [G, K, N]
    (128x128) QTensors, checked by the caller (`references.gmm.abs_product`); rows past
    sum(group_sizes) zero.  A group at a time, rows in chunks whose partials take about
    8 MiB."""
    (m, k), (g, _, n) = lhs.values.shape, rhs.values.shape
    gs = check_group_sizes(group_sizes, g, m)
    offs = group_offsets(gs)
    out = np.zeros((m, n))
    path = _digit_path()
    chunk = max(1, _CHUNK_BYTES // (8 * (k // BLOCK) * n))
    scratch = np.empty((k // BLOCK) * min(chunk, int(gs.max(initial=0))) * n)
    for gi in range(g):
        if not gs[gi]:
            continue
        b = AbsRhs(rhs.values[gi], rhs.scales[gi], rhs.fmt, path)
        for r0 in range(offs[gi], offs[gi + 1], chunk):
            r1 = min(r0 + chunk, offs[gi + 1])
            out[r0:r1] = abs_chunk(lhs.values[r0:r1], lhs.scales[r0:r1], b, scratch)
    return out
