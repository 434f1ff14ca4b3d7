"""Reference grouped matmuls: `gmm` (forward), `tgmm` (weight gradient), `dgrad` (input
gradient), and `abs_product` (the |A||B| that error bounds need).

Layout: lhs [M, K]; rhs [G, K, N]; group_sizes [G] int, sum(group_sizes) <= M; the rows of
group g are the next group_sizes[g] rows of lhs; output rows at or past sum(group_sizes)
are zero.

Exactness of the FP8 forward.  Every e4m3fn value is an integer multiple of 2^-9 (the
smallest subnormal) of magnitude at most 448 < 2^9, i.e. at most 2^18 units.  The product of
two is therefore a multiple of 2^-18 below 2^36 such units, and a sum of fewer than 2^17
such products is a multiple of 2^-18 below 2^53 units: every partial sum, in any order and
with or without fused multiply-adds, is a float64 value, so the float64 matmul of one
128-wide K block (BLAS, any blocking) returns the exact partial P.  The reference rounds P
once to float32 and then applies the accumulation recipe across K blocks in K order, with
float32 round-to-nearest-even and an exact float32 fma (`exact.fma_f32`):

=========  ==========================================
deepgemm   acc = fma(RN(sa*sb), P, acc)
cublas     acc = fma(RN(P*sa), sb, acc)
tokamax    acc = RN(RN(RN(P*sa)*sb) + acc)
exact      sum of P*sa*sb in exact arithmetic, rounded once to out_dtype (the true value)
=========  ==========================================

e5m2 values span 2^-16 .. 57344, so their 128-wide partials need up to ~70 bits: the
reference computes them with the exact superaccumulator instead of float64 BLAS.

Plain (unquantized bf16 / float32) operands have no blocks and no scales: their only recipe
is `exact` (products of two float32 are exact in float64; the sum is exact in the
superaccumulator), rounded once to out_dtype.
"""

from __future__ import annotations

import ml_dtypes
import numba
import numpy as np

from fp8check.references.exact import (
    NCELLS,
    acc_add,
    acc_round,
    fma_f32_scalar,
    precision_of,
    round_pair_f32,
    two_product,
)
from fp8check.references.quant import QTensor, expand_scales

ACCUMS = ("deepgemm", "cublas", "tokamax", "exact")
_ACCUM_CODE = {"deepgemm": 0, "cublas": 1, "tokamax": 2}
OUT_DTYPES = (np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float64))
PLAIN_DTYPES = (np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16))
# Rows of one group handled per step: keeps the float64 partials of a chunk near 8 MiB.
_CHUNK_BYTES = 8 << 20
_NO_REMAINDER = np.zeros((0, 0, 0), np.float64)


def _fp8_lut(dtype) -> np.ndarray:
    return np.arange(256, dtype=np.uint8).view(dtype).astype(np.float64)


_LUT = {np.dtype(d): _fp8_lut(d) for d in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)}


def _to_f64(values: np.ndarray) -> np.ndarray:
    """Exact float64 image of an fp8 / bf16 / f32 array (fp8 through a 256-entry table)."""
    lut = _LUT.get(values.dtype)
    if lut is None:
        return values.astype(np.float64)
    return lut[values.view(np.uint8)]


def check_group_sizes(group_sizes, num_groups: int, m: int) -> np.ndarray:
    """Validate and return group_sizes as int64 [G]; ValueError with the reason otherwise."""
    gs = np.asarray(group_sizes)
    if gs.ndim != 1 or not np.issubdtype(gs.dtype, np.integer):
        raise ValueError(f"group_sizes must be a 1-D integer array, got {gs.dtype} {gs.shape}")
    if gs.shape[0] != num_groups:
        raise ValueError(f"group_sizes has {gs.shape[0]} groups, rhs has {num_groups}")
    if (gs < 0).any():
        raise ValueError(f"negative group size at group {int(np.argmax(gs < 0))}")
    if int(gs.sum()) > m:
        raise ValueError(f"sum(group_sizes) = {int(gs.sum())} exceeds M = {m}")
    return gs.astype(np.int64)


def group_offsets(group_sizes: np.ndarray) -> np.ndarray:
    """Start row of each group and the end of the last: int64 [G + 1]."""
    return np.concatenate([[0], np.cumsum(group_sizes)]).astype(np.int64)


def _check_operands(lhs, rhs):
    """Return (blockwise, M, K, N, G) after checking kinds, shapes and dtypes."""
    if isinstance(lhs, QTensor) != isinstance(rhs, QTensor):
        raise ValueError("lhs and rhs must both be QTensors or both be plain arrays")
    blockwise = isinstance(lhs, QTensor)
    a, b = (lhs.values, rhs.values) if blockwise else (np.asarray(lhs), np.asarray(rhs))
    if a.ndim != 2 or b.ndim != 3:
        raise ValueError(f"expected lhs [M,K] and rhs [G,K,N], got {a.shape} and {b.shape}")
    m, k = a.shape
    g, k2, n = b.shape
    if k != k2:
        raise ValueError(f"K mismatch: lhs has K={k}, rhs has K={k2}")
    if blockwise:
        if lhs.block != (1, 128) or rhs.block != (128, 128):
            raise ValueError(
                f"blockwise gmm needs lhs (1,128) and rhs (128,128) blocks, "
                f"got {lhs.block} and {rhs.block}"
            )
        if lhs.fmt != rhs.fmt:
            raise ValueError(f"lhs is {lhs.fmt} but rhs is {rhs.fmt}")
        if k % 128:
            raise ValueError(f"blockwise gmm needs K a multiple of 128, got K={k}")
        if a.dtype not in _LUT or b.dtype not in _LUT:
            raise ValueError(f"QTensor values must be fp8, got {a.dtype} and {b.dtype}")
    elif a.dtype not in PLAIN_DTYPES or b.dtype not in PLAIN_DTYPES:
        raise ValueError(
            f"plain gmm operands must be float32 or bfloat16, got {a.dtype} and {b.dtype}"
        )
    return blockwise, m, k, n, g


def _check_out(out_dtype, accum: str) -> np.dtype:
    dt = np.dtype(out_dtype)
    if dt not in OUT_DTYPES:
        raise ValueError(f"out_dtype must be float32, bfloat16 or float64, got {dt}")
    if dt == np.float64 and accum != "exact":
        raise ValueError("out_dtype float64 is only meaningful with accum='exact'")
    return dt


@numba.njit(cache=True)
def _accumulate(p_hi, p_lo, sa, sb, code):
    """Apply recipe `code` over K blocks in order.  p_hi + p_lo [KB, m, N] are the exact
    partials (p_hi = RN64, p_lo the exact remainder), sa [m, KB], sb [KB, N] (rhs scales
    expanded over N) -> acc float32 [m, N]."""
    kb_n, m, n = p_hi.shape
    has_lo = p_lo.shape[0] != 0  # e4m3 partials are exact in float64: no remainder
    acc = np.zeros((m, n), np.float32)
    for i in range(m):
        for kb in range(kb_n):
            a = sa[i, kb]
            for j in range(n):
                p = round_pair_f32(p_hi[kb, i, j], p_lo[kb, i, j]) if has_lo else (
                    np.float32(p_hi[kb, i, j]))
                b = sb[kb, j]
                if code == 0:
                    acc[i, j] = fma_f32_scalar(a * b, p, acc[i, j])
                elif code == 1:
                    acc[i, j] = fma_f32_scalar(p * a, b, acc[i, j])
                else:
                    acc[i, j] = (p * a) * b + acc[i, j]
    return acc


@numba.njit(cache=True)
def _accumulate_exact(p_hi, p_lo, sa, sb, prec, emin):
    """Exact sum over K blocks of (p_hi + p_lo) * sa * sb, rounded once -> float64 [m, N]."""
    kb_n, m, n = p_hi.shape
    has_lo = p_lo.shape[0] != 0
    out = np.empty((m, n), np.float64)
    for i in range(m):
        acc = np.zeros(NCELLS, np.int64)
        for j in range(n):
            for kb in range(kb_n):
                s = np.float64(sa[i, kb]) * np.float64(sb[kb, j])  # exact: 24 + 24 bits
                for p in (p_hi[kb, i, j], p_lo[kb, i, j] if has_lo else 0.0):
                    hi, lo = two_product(p, s)
                    acc_add(acc, hi)
                    acc_add(acc, lo)
            out[i, j] = acc_round(acc, prec, emin)
    return out


@numba.njit(cache=True)
def exact_matmul(a, b, prec, emin):
    """Exact a @ b for float64 a [m, k], b [k, n] whose pairwise products are exact in
    float64 (true for images of float32 / bf16 / fp8), rounded once -> float64 [m, n]."""
    m, k = a.shape
    n = b.shape[1]
    out = np.empty((m, n), np.float64)
    for i in range(m):
        acc = np.zeros(NCELLS, np.int64)
        for j in range(n):
            for t in range(k):
                acc_add(acc, a[i, t] * b[t, j])
            out[i, j] = acc_round(acc, prec, emin)
    return out


@numba.njit(cache=True)
def _exact_pair_partials(a, b):
    """Exact 128-wide partials as float64 pairs, for operands whose float64 sums may round
    (e5m2 partials need up to ~71 bits).  a [KB, m, 128], b [KB, 128, n] ->
    (hi, lo) [KB, m, n] with hi = RN64(P) and lo = P - hi exactly (at most 18 bits)."""
    kb_n, m, w = a.shape
    n = b.shape[2]
    hi = np.empty((kb_n, m, n), np.float64)
    lo = np.empty((kb_n, m, n), np.float64)
    acc = np.zeros(NCELLS, np.int64)
    for kb in range(kb_n):
        for i in range(m):
            for j in range(n):
                for t in range(w):
                    acc_add(acc, a[kb, i, t] * b[kb, t, j])
                h = acc_round(acc, 53, -1022)
                for t in range(w):
                    acc_add(acc, a[kb, i, t] * b[kb, t, j])
                acc_add(acc, -h)
                hi[kb, i, j] = h
                lo[kb, i, j] = acc_round(acc, 53, -1022)
    return hi, lo


def _partials(a64: np.ndarray, b64: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """Exact 128-wide K partials as (hi, lo): a64 [m, K], b64 [K, N] -> 2 x [KB, m, N]."""
    m, k = a64.shape
    kb = k // 128
    if fmt == "e4m3fn":
        hi = np.empty((kb, m, b64.shape[1]), np.float64)
        for b in range(kb):  # exact in any order, see the module docstring
            np.matmul(a64[:, 128 * b : 128 * (b + 1)], b64[128 * b : 128 * (b + 1)], out=hi[b])
        return hi, _NO_REMAINDER
    a3 = np.ascontiguousarray(a64.reshape(m, kb, 128).transpose(1, 0, 2))
    return _exact_pair_partials(a3, np.ascontiguousarray(b64.reshape(kb, 128, -1)))


def _gmm_blockwise(lhs: QTensor, rhs: QTensor, gs, out: np.ndarray, accum: str, prec):
    n = rhs.values.shape[2]
    kb = lhs.values.shape[1] // 128
    offs = group_offsets(gs)
    chunk = max(1, _CHUNK_BYTES // (8 * kb * n))
    for g in range(gs.shape[0]):
        if gs[g] == 0:
            continue
        b64 = _to_f64(rhs.values[g])
        sb = np.repeat(rhs.scales[g].astype(np.float32), 128, axis=1)[:, :n]
        sb = np.ascontiguousarray(sb)
        for r0 in range(offs[g], offs[g + 1], chunk):
            r1 = min(r0 + chunk, offs[g + 1])
            p_hi, p_lo = _partials(_to_f64(lhs.values[r0:r1]), b64, lhs.fmt)
            sa = np.ascontiguousarray(lhs.scales[r0:r1].astype(np.float32))
            if accum == "exact":
                res = _accumulate_exact(p_hi, p_lo, sa, sb, *prec)
            else:
                res = _accumulate(p_hi, p_lo, sa, sb, _ACCUM_CODE[accum])
            out[r0:r1] = res.astype(out.dtype)


def gmm(lhs, rhs, group_sizes, out_dtype=np.float32, accum: str | None = None) -> np.ndarray:
    """Reference grouped matmul out[rows of g] = lhs[rows of g] @ rhs[g].

    lhs: QTensor with (1,128) blocks [M, K] or a plain float32/bfloat16 array [M, K].
    rhs: QTensor with (128,128) blocks [G, K, N] or a plain array [G, K, N] (same kind).
    accum: "deepgemm" (default for QTensors), "cublas", "tokamax" or "exact" (the only
      recipe, and the default, for plain operands).
    out_dtype: float32 or bfloat16 (RNE from the float32 accumulator, or once from the exact
      value for "exact"), or float64 with "exact" (the exact value correctly rounded).
    Rows at or past sum(group_sizes) are zero.
    """
    blockwise, m, _, n, g = _check_operands(lhs, rhs)
    accum = accum or ("deepgemm" if blockwise else "exact")
    if accum not in ACCUMS:
        raise ValueError(f"unknown accum {accum!r}; expected one of {ACCUMS}")
    if not blockwise and accum != "exact":
        raise ValueError(f"accum {accum!r} needs blockwise FP8 operands; plain ones use 'exact'")
    dt = _check_out(out_dtype, accum)
    gs = check_group_sizes(group_sizes, g, m)
    # The exact path rounds once, straight to the output format; the recipes round to
    # float32 in the accumulator and the cast to bf16 below is the kernel's output rounding.
    prec = precision_of(dt)
    out = np.zeros((m, n), dt)
    if blockwise:
        _gmm_blockwise(lhs, rhs, gs, out, accum, prec)
        return out
    offs = group_offsets(gs)
    a64 = _to_f64(np.asarray(lhs))
    for gi in range(g):
        if gs[gi]:
            r0, r1 = offs[gi], offs[gi + 1]
            out[r0:r1] = exact_matmul(a64[r0:r1], _to_f64(np.asarray(rhs)[gi]), *prec).astype(dt)
    return out


def _check_plain(name: str, x) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype not in PLAIN_DTYPES:
        raise ValueError(f"{name} must be float32 or bfloat16, got {x.dtype}")
    return x


def _check_exact_out(out_dtype) -> np.dtype:
    return _check_out(out_dtype, "exact")


def tgmm(lhs, dy, group_sizes, out_dtype=np.float32) -> np.ndarray:
    """Weight gradient dW[g] = lhs[rows of g]^T @ dy[rows of g], exact, rounded once.

    lhs [M, K], dy [M, N] float32 or bfloat16; returns [G, K, N] of out_dtype (float32,
    bfloat16 or float64).  An empty group gives zeros; rows past sum(group_sizes) are not
    read.
    """
    lhs, dy = _check_plain("lhs", lhs), _check_plain("dy", dy)
    if lhs.ndim != 2 or dy.ndim != 2 or lhs.shape[0] != dy.shape[0]:
        raise ValueError(f"expected lhs [M,K] and dy [M,N], got {lhs.shape} and {dy.shape}")
    dt = _check_exact_out(out_dtype)
    gs = check_group_sizes(group_sizes, np.asarray(group_sizes).shape[0], lhs.shape[0])
    offs = group_offsets(gs)
    a64, d64 = _to_f64(lhs), _to_f64(dy)
    out = np.zeros((gs.shape[0], lhs.shape[1], dy.shape[1]), dt)
    prec = precision_of(dt)
    for g in range(gs.shape[0]):
        if gs[g]:
            r0, r1 = offs[g], offs[g + 1]
            at = np.ascontiguousarray(a64[r0:r1].T)
            out[g] = exact_matmul(at, np.ascontiguousarray(d64[r0:r1]), *prec).astype(dt)
    return out


def dgrad(dy, rhs, group_sizes, out_dtype=np.float32) -> np.ndarray:
    """Input gradient dX[rows of g] = dy[rows of g] @ rhs[g]^T, exact, rounded once.

    dy [M, N], rhs [G, K, N] float32 or bfloat16; returns [M, K]; rows at or past
    sum(group_sizes) are zero.
    """
    dy, rhs = _check_plain("dy", dy), _check_plain("rhs", rhs)
    if dy.ndim != 2 or rhs.ndim != 3 or dy.shape[1] != rhs.shape[2]:
        raise ValueError(f"expected dy [M,N] and rhs [G,K,N], got {dy.shape} and {rhs.shape}")
    dt = _check_exact_out(out_dtype)
    gs = check_group_sizes(group_sizes, rhs.shape[0], dy.shape[0])
    offs = group_offsets(gs)
    d64 = _to_f64(dy)
    out = np.zeros((dy.shape[0], rhs.shape[1]), dt)
    prec = precision_of(dt)
    for g in range(gs.shape[0]):
        if gs[g]:
            r0, r1 = offs[g], offs[g + 1]
            wt = np.ascontiguousarray(_to_f64(rhs[g]).T)
            out[r0:r1] = exact_matmul(np.ascontiguousarray(d64[r0:r1]), wt, *prec).astype(dt)
    return out


def _abs_f64(x, sl) -> np.ndarray:
    """|x[sl]| in float64, exact; x a QTensor (dequantized, fp8 x float32 needs at most
    28 bits) or a plain array.  `sl` indexes the leading dim, so a group at a time is
    materialised, never a whole operand."""
    if isinstance(x, QTensor):
        v, sc = _to_f64(x.values[sl]), x.scales[sl].astype(np.float64)
        return np.abs(v * expand_scales(sc, x.block, v.shape))
    return np.abs(_to_f64(np.asarray(x)[sl]))


def abs_product(lhs, rhs, group_sizes) -> np.ndarray:
    """An upper bound of (|A||B|)_ij on the dequantized operands, float64 [M, N].

    The float64 matmul of non-negative exact values has relative error at most
    gamma_K(2^-53); the result is scaled up by (1 + 2 (K + 2) 2^-53) so that it bounds the
    true product.  Rows past sum(group_sizes) are zero.  Works one group at a time.
    """
    _, m, k, n, g = _check_operands(lhs, rhs)
    gs = check_group_sizes(group_sizes, g, m)
    out = np.zeros((m, n), np.float64)
    offs = group_offsets(gs)
    for gi in range(g):
        if gs[gi]:
            rows = slice(offs[gi], offs[gi + 1])
            out[rows] = _abs_f64(lhs, rows) @ _abs_f64(rhs, gi)
    out *= 1.0 + 2.0 * (k + 2) * 2.0**-53
    return out
