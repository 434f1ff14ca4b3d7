"""Exact matmul of float32 / bfloat16 values, rounded once: `exact_matmul`.

a [m, k] and b [k, n] hold float64 images of float32 or bfloat16 values, so every product
a[i, t] b[t, j] is exact in float64 (at most 24 + 24 significant bits, exponents far from
float64's limits) and the sum of k of them is what has to be exact.  Three paths, the
same bits:

Fast path (the common case: values spanning few binades per row).  Split a's rows and b's
columns once: a = a1 + a2, b = b1 + b2, where a1 holds per row the integers of at most
beta = floor((53 - ceil(log2 k)) / 2) bits times one power of two (`split_top`) and a2
the exact remainder, which is zero for every value within beta - 8 (bf16) or beta - 24
(float32) binades of its row's largest.  Then

    a b = a1 b1 + (a b2 + a2 b1)

where a1 b1 is exact from float64 BLAS in any order (the sum of k products of 2 beta-bit
integers times one common power of two stays below 2^53 units), and the correction
C = a b2 + a2 b1 has terms only where a2 or b2 is nonzero: few, so it is summed directly
(`_correction`) together with the sum of the terms' magnitudes, which bounds its rounding
error: at most 2k exact terms, added in float64, err by at most gamma_2k = 2k u / (1 - 2k
u) times the sum of their magnitudes (u = 2^-53); `_ERR_PER_TERM` covers that, the
rounding of the computed magnitude sum and of the product with it.  TwoSum(a1 b1, C)
gives the pair s + e and `certified.round_certified` rounds it once, certified, or flags
it; flagged elements (ties, results at a rounding boundary within the bound, underflow to
zero) are summed exactly in the superaccumulator (`certified.exact_dots`).

Dense path (remainders with too many nonzeros for the correction to be cheap): Ozaki's
error-free slicing all the way (`slices`): a's rows and b's columns split into slices of
beta-bit integers times a power of two, every slice product exact from BLAS, the few
slice products added exactly in the superaccumulator and rounded once.

Term path (data spanning so many binades per row that slices would be too many): every
product into the superaccumulator.

Non-finite inputs: the float64 product of finite values never overflows (k < 2^28 terms
below 2^256 each), so an output element is non-finite exactly when its terms touch a NaN
or an infinity; it gets the IEEE float64 value of that sum (NaN for inf - inf or inf * 0,
else the infinity), and every other element is computed exactly with the non-finite
inputs replaced by zero (they are not among its terms).
"""

from __future__ import annotations

import numba
import numpy as np
from numpy.typing import DTypeLike

from fp8check.references.certified import exact_dots, round_certified
from fp8check.references.exact import exact_sum_rows, precision_of, two_sum

_U = 2.0**-53
_MAX_SLICE_PAIRS = 16
_SPARSE_FRACTION = 1 / 16  # the correction's work, as a share of the matmul's, past which
#                            the dense path is cheaper


def slice_bits(k: int) -> int:
    """beta: the bits per slice integer such that k products of two stay below 2^53."""
    return (53 - max(1, k - 1).bit_length()) // 2


def split_top(x: np.ndarray, beta: int, axis: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """x [m, k] float64 -> (hi, x - hi) exactly, hi holding per row (axis=1; per column with
    axis=0) integers of magnitude <= 2^beta times the row's unit 2^(floor(log2 max|x_row|)
    + 1 - beta).  Both keep x's memory layout (a transposed view stays one).

    Exact: dividing by a power of two and rint are exact, |x / unit| < 2^beta, and x - hi
    is a multiple of ulp(x_i) (hi is a multiple of unit, itself a multiple of ulp(x_i)
    whenever hi_i != x_i) of magnitude <= unit / 2.  The values here are images of float32
    / bf16 data, far from float64's under/overflow.
    """
    mu = np.max(np.abs(x), axis=axis, keepdims=True)
    e = np.frexp(np.where(mu > 0, mu, 1.0))[1] - 1  # floor(log2 mu), exactly
    unit = np.ldexp(1.0, e + 1 - beta)
    hi = np.rint(x / unit) * unit
    return hi, x - hi


def slices(x: np.ndarray, beta: int, max_slices: int, axis: int = 1) -> list[np.ndarray] | None:
    """Split float64 x [m, k] row by row (axis=1; column by column with axis=0) into
    x = sum(slices) exactly (`split_top` on each remainder in turn); None if more than
    max_slices are needed."""
    out: list[np.ndarray] = []
    r = np.array(x, dtype=np.float64)
    while r.any():
        if len(out) == max_slices:
            return None
        hi, r = split_top(r, beta, axis)
        out.append(hi)
    return out


def exact_matmul_terms(a: np.ndarray, b: np.ndarray, prec: int, emin: int) -> np.ndarray:
    """exact_matmul term by term: every product into the superaccumulator
    (`certified.exact_dots` on every element) -> float64 [m, n].  The path for operands
    whose slices would be too many, and the tests' oracle."""
    m, n = a.shape[0], b.shape[1]
    rows, cols = np.divmod(np.arange(m * n), n)
    return exact_dots(a, b, rows, cols, prec, emin).reshape(m, n)


def _dense(a, b, a1, a2, b1, b2, beta: int, prec: int, emin: int) -> np.ndarray:
    """Ozaki's slices all the way, continuing from the first split a1 + a2, b1 + b2."""
    sa = slices(a2, beta, _MAX_SLICE_PAIRS - 1)
    sb = slices(b2, beta, _MAX_SLICE_PAIRS - 1, axis=0)
    if sa is None or sb is None or (len(sa) + 1) * (len(sb) + 1) > _MAX_SLICE_PAIRS:
        return exact_matmul_terms(a, b, prec, emin)
    prods = np.stack([x @ y for x in (a1, *sa) for y in (b1, *sb)])  # [pairs, m, n], exact
    terms = prods.reshape(prods.shape[0], -1).T
    return exact_sum_rows(terms, prec, emin).reshape(a.shape[0], b.shape[1])


@numba.njit(parallel=True, cache=True)
def _round_block(rows, cols, col_pos, t1, a, a2_cols, a2_vals, a2_ptr, b1, b2_rows, b2_cols,
                 b2_vals, err_per_term, prec, emin):
    """The elements rows x cols (parallel over rows): the correction C = a @ b2 + a2 @ b1
    and the sum of its terms' magnitudes, from the nonzeros of a2 (CSR: row i's are
    a2_ptr[i]:a2_ptr[i+1]) and of b2 (coordinates, their columns all among cols; col_pos
    maps a column to its place in cols), TwoSum(t1, C) and its certified rounding ->
    (rounded [len(rows), len(cols)] float64, flagged: left for the exact fallback)."""
    nc = cols.shape[0]
    out = np.empty((rows.shape[0], nc))
    flagged = np.empty((rows.shape[0], nc), np.bool_)
    for r in numba.prange(rows.shape[0]):
        i = rows[r]
        c = np.zeros(nc)
        mag = np.zeros(nc)
        for z in range(a2_ptr[i], a2_ptr[i + 1]):
            t, v = a2_cols[z], a2_vals[z]
            for jj in range(nc):
                term = v * b1[t, cols[jj]]
                c[jj] += term
                mag[jj] += abs(term)
        for z in range(b2_rows.shape[0]):
            jj = col_pos[b2_cols[z]]
            term = a[i, b2_rows[z]] * b2_vals[z]
            c[jj] += term
            mag[jj] += abs(term)
        for jj in range(nc):
            s, e = two_sum(t1[i, cols[jj]], c[jj])
            out[r, jj], certain = round_certified(s, e, mag[jj] * err_per_term, prec, emin)
            flagged[r, jj] = not certain
    return out, flagged


def _fast(a, b, a1, a2, b1, b2, out: np.ndarray) -> None:
    """Into out: a1 @ b1 from BLAS, exact, cast once to out's dtype where no correction
    reaches (RN: numpy's and ml_dtypes' casts from float64 round once, correctly); the rows
    of a2 and the columns of b2 with nonzeros through `_round_block` and, where flagged,
    `certified.exact_dots`."""
    m, k = a.shape
    n = b.shape[1]
    dt = out.dtype
    if dt == np.float64:
        t1 = np.matmul(a1, b1, out=out)  # exact, see the module docstring
    else:
        t1 = a1 @ b1
        out[...] = t1
    rows_c = np.flatnonzero(a2.any(axis=1))
    b2r, b2c = np.nonzero(b2)
    cols_c = np.unique(b2c)
    if not rows_c.size and not cols_c.size:
        return
    a2r, a2c = np.nonzero(a2)
    ptr = np.searchsorted(a2r, np.arange(m + 1))
    others = np.ones(m, np.bool_)
    others[rows_c] = False
    prec, emin = precision_of(dt)
    # C's at most 2k terms: |C - c| <= gamma_{2k} sum|terms| <= gamma_{2k} mag / (1 - gamma_{2k})
    # (mag, a sum of non-negative terms, is low by at most that factor); (2k + 2) u covers
    # it and the rounding of mag * (2k + 2) u for k < 2^24.
    err_per_term = (2 * k + 2) * _U
    args = (t1, a, a2c, a2[a2r, a2c], ptr, b1, b2r, b2c, b2[b2r, b2c], err_per_term, prec, emin)
    # Whole rows where a2 has nonzeros, then the other rows in the columns where b2 has:
    # each element once (out may be t1 itself), each block's b2 columns among its columns.
    for rows, cols in ((rows_c, np.arange(n)), (np.flatnonzero(others), cols_c)):
        if not rows.size or not cols.size:
            continue
        col_pos = np.full(n, -1, np.int64)
        col_pos[cols] = np.arange(cols.size)
        vals, flagged = _round_block(rows, cols, col_pos, *args)
        out[np.ix_(rows, cols)] = vals.astype(dt)
        fr, fc = np.nonzero(flagged)
        if fr.size:
            i, j = rows[fr], cols[fc]
            out[i, j] = exact_dots(a, b, i, j, prec, emin).astype(dt)


def _finite_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    m, k = a.shape
    n = b.shape[1]
    beta = slice_bits(k)
    a1, a2 = split_top(a, beta, axis=1)
    b1, b2 = split_top(b, beta, axis=0)
    if np.count_nonzero(a2) * n + np.count_nonzero(b2) * m > _SPARSE_FRACTION * m * n * k:
        out[...] = _dense(a, b, a1, a2, b1, b2, beta, *precision_of(out.dtype))
    else:
        _fast(a, b, a1, a2, b1, b2, out)


def exact_matmul(a: np.ndarray, b: np.ndarray, out_dtype: DTypeLike,
                 out: np.ndarray | None = None) -> np.ndarray:
    """Exact a @ b for float64 a [m, k], b [k, n] (any memory layout) holding images of
    float32 / bf16 values, rounded once to out_dtype (float64, float32 or bfloat16) ->
    [m, n] of out_dtype, written into `out` (C-contiguous, of that shape and dtype) when
    given.  Non-finite inputs give the IEEE values of the elements they reach (module
    docstring)."""
    dt = np.dtype(out_dtype)
    precision_of(dt)  # ValueError for a format without exact rounding
    m, n = a.shape[0], b.shape[1]
    if out is None:
        out = np.empty((m, n), dt)
    elif out.shape != (m, n) or out.dtype != dt or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous {dt} {(m, n)}, got {out.dtype} {out.shape}")
    if m == 0 or n == 0 or a.shape[1] == 0:
        out[...] = 0
        return out
    finite_a, finite_b = np.isfinite(a), np.isfinite(b)
    # Casts past the output's range give inf (the IEEE rounding), and the non-finite
    # elements' NaNs are the values asked for: neither is worth a warning.
    with np.errstate(over="ignore", invalid="ignore"):
        if finite_a.all() and finite_b.all():
            _finite_matmul(a, b, out)
            return out
        _finite_matmul(np.where(finite_a, a, 0.0), np.where(finite_b, b, 0.0), out)
        bad = ~finite_a.all(axis=1)[:, None] | ~finite_b.all(axis=0)[None, :]
        out[bad] = (a @ b)[bad].astype(dt)
    return out
