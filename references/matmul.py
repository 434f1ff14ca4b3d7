"""Exact matmul of float32 / bfloat16 values, rounded once: `exact_matmul`.

a [m, k] and b [k, n] hold float32 or bfloat16 values, taken as float32 (bf16 widens
exactly: no float64 copy of an operand is made), so every product a[i, t] b[t, j] is
exact in float64 (at most 24 + 24 significant bits, exponents far from float64's limits)
and the sum of k of them is what has to be exact.  Three paths, the same bits:

Fast path (the common case: values spanning few binades per row).  Split a's rows and b's
columns once: a = a1 + a2, b = b1 + b2, where a1 holds per row the integers of at most
beta = floor((53 - ceil(log2 k)) / 2) bits times one power of two (`split_top`) and a2
the exact remainder, which is zero for every value within beta - 8 (bf16) or beta - 24
(float32) binades of its row's largest.  Then

    a b = a1 b1 + (a b2 + a2 b1)

where a1 b1 is exact from float64 BLAS in any order (the sum of k products of 2 beta-bit
integers times one common power of two stays below 2^53 units), and the correction
C = a b2 + a2 b1 has terms only where a2 or b2 is nonzero: few, so it is summed directly
(`_round_block`, TwoSum by TwoSum) together with the sum of the terms' magnitudes, which
bounds its rounding error: none when every addition was exact (bf16 products have few
bits: the common case, and the one that lets exact ties round to even without the
fallback), else n exact terms added in float64 err by at most gamma_(n-1) = (n-1) u /
(1 - (n-1) u) times the sum of their magnitudes (u = 2^-53), covered with the rounding of
the computed magnitude sum and of the product with it by (n + 1) u.  TwoSum(a1 b1, C)
gives the pair s + e and `certified.round_certified` rounds it once, certified, or flags
it; flagged elements (ties, results at a rounding boundary within the bound, underflow to
zero) are summed exactly in the superaccumulator (`certified.exact_dots`).

Dense path (remainders with too many nonzeros for the correction to be cheap): Ozaki's
error-free slicing all the way (`slices`): a's rows and b's columns split into slices of
beta-bit integers times a power of two, every slice product exact from BLAS, the few
slice products added exactly in the superaccumulator and rounded once.

Term path (data spanning so many binades per row that slices would be too many): every
product into the superaccumulator.

Integer path (bf16 operands, a CPU with AMX int8 tiles or AVX512-VNNI, k <=
`bf16_matmul.MAX_K`; tried first): the fast path's scheme with the top parts' product on
integer dot products (`references.bf16_matmul`: its own split at each line's largest
exponent, t1 exact from AMX int8 tiles or VNNI int16 dot products, the residuals' terms
added exactly in an integer fixed point and one rounding, fused in C), the rare
elements with a term below that fixed point through `certified.exact_dots`; operands with
a non-finite value or too many residuals take the paths above.

Non-finite inputs: the float64 product of finite values never overflows (k < 2^28 terms
below 2^256 each), so an output element is non-finite exactly when its terms touch a NaN
or an infinity; it gets the IEEE float64 value of that sum (NaN for inf - inf or inf * 0,
else the infinity), and every other element is computed exactly with the non-finite
inputs replaced by zero (they are not among its terms).  The splits find them (a count
of non-finite values comes with each), so finite operands are read no extra time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numba
import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from fp8check.references import bf16_matmul
from fp8check.references.casts import BF16, rounded, to_float64
from fp8check.references.certified import exact_dots, round_certified
from fp8check.references.exact import exact_sum_rows, precision_of, two_sum
from fp8check.references.jit import one_signature

_U = 2.0**-53
_MAX_SLICE_PAIRS = 16
_SPARSE_FRACTION = 1 / 16  # the correction's work, as a share of the matmul's, past which
#                            the dense path is cheaper


def slice_bits(k: int) -> int:
    """beta: the bits per slice integer such that k products of two stay below 2^53."""
    return (53 - max(1, k - 1).bit_length()) // 2


@numba.njit(cache=True, inline="always")
def _units(mu, beta):
    """(unit, 1 / unit) for a line of largest magnitude mu: unit = 2^(floor(log2 mu) + 1 -
    beta) for mu > 0 (any power of two for an all-zero line)."""
    e = math.frexp(mu if mu > 0 else 1.0)[1] - beta
    return math.ldexp(1.0, e), math.ldexp(1.0, -e)


_F32_MAX = np.float32(np.finfo(np.float32).max)


@numba.njit(cache=True, inline="always")
def _value(bits, shift):
    """The float32 whose bits are `bits` << shift: float32 bits (uint32, shift 0) or bf16
    ones (uint16, shift 16: a bf16 is the top half of the float32 of the same value)."""
    return np.uint32(np.uint32(bits) << shift).view(np.float32)


@numba.njit(parallel=True, cache=True)
def _split_rows(bits, shift, beta):
    """(hi, nnz, non-finite count) of split_top along the rows of a C-ordered float32 or
    bf16 x given as its bits (`_value`), in parallel over rows."""
    m, k = bits.shape
    hi = np.empty((m, k))
    nnz = np.zeros(m, np.int64)
    bad = np.zeros(m, np.int64)
    for i in numba.prange(m):
        mu = np.float32(0.0)
        nf = 0
        for t in range(k):
            v = abs(_value(bits[i, t], shift))
            mu = v if v > mu else mu
            nf += not v <= _F32_MAX
        unit, inv = _units(np.float64(mu), beta)
        c = 0
        for t in range(k):
            x = _value(bits[i, t], shift)
            h = np.rint(x * inv) * unit
            hi[i, t] = h
            c += x != h
        nnz[i] = c
        bad[i] = nf
    return hi, nnz, bad.sum()


@numba.njit(parallel=True, cache=True)
def _split_cols(bits, shift, beta):
    """(hi, nnz, non-finite count) of split_top along the columns of a C-ordered float32
    or bf16 x given as its bits (`_value`), in parallel over chunks of 32 rows, each walked
    in memory order (per-chunk column maxima and counts, reduced after: the inner loops
    vectorize)."""
    m, k = bits.shape
    nch = (m + 31) // 32
    mus = np.zeros((nch, k), np.float32)
    bad = np.zeros((nch, k), np.int64)
    for c in numba.prange(nch):
        for i in range(32 * c, min(m, 32 * c + 32)):
            for t in range(k):
                v = abs(_value(bits[i, t], shift))
                mus[c, t] = v if v > mus[c, t] else mus[c, t]
                bad[c, t] += not v <= _F32_MAX
    mu = np.zeros(k, np.float32)
    for c in range(nch):
        for t in range(k):
            mu[t] = mus[c, t] if mus[c, t] > mu[t] else mu[t]
    unit, inv = np.empty(k), np.empty(k)
    for t in range(k):
        unit[t], inv[t] = _units(np.float64(mu[t]), beta)
    hi = np.empty((m, k))
    cnt = np.zeros((nch, k), np.int64)
    for c in numba.prange(nch):
        for i in range(32 * c, min(m, 32 * c + 32)):
            for t in range(k):
                x = _value(bits[i, t], shift)
                h = np.rint(x * inv[t]) * unit[t]
                hi[i, t] = h
                cnt[c, t] += np.int64(x != h)
    # the chunks' counts summed by hand: numba's array sums compile slowly
    nnz = np.zeros(k, np.int64)
    nonfinite = 0
    for c in range(nch):
        for t in range(k):
            nnz[t] += cnt[c, t]
            nonfinite += bad[c, t]
    return hi, nnz, nonfinite


def split_top(x: np.ndarray, beta: int, axis: int = 1) -> tuple[np.ndarray, np.ndarray, bool]:
    """float32 or bf16 x [m, k] -> (hi, nnz, finite): hi (float64) holding per row
    (axis=1; per column with axis=0) integers of magnitude <= 2^beta times the row's unit
    2^(floor(log2 max|x_row|) + 1 - beta), nnz [m] (axis=1; [k] with axis=0) the nonzeros
    of the remainder x - hi per row (column), and whether every x is finite (when not, hi
    and nnz mean nothing).  hi keeps x's memory layout (a transposed view stays one).  The
    remainder is not formed here: callers take it where they need it.  x is read as it
    is: a bf16 operand is widened inside, a value at a time.

    Exact: multiplying by a power of two and rint are exact, |x / unit| < 2^beta, and
    x - hi is a multiple of ulp(x_i) (hi is a multiple of unit, itself a multiple of
    ulp(x_i) whenever hi_i != x_i) of magnitude <= unit / 2, so x - hi is exact in float64
    and, having at most 24 significant bits on float32's grid, in float32 too.
    """
    bits = x.view(np.uint32 if x.dtype == np.float32 else np.uint16)
    flip = not bits.flags.c_contiguous and bits.flags.f_contiguous
    xc = np.ascontiguousarray(bits.T if flip else bits)
    split = _split_rows if (axis == 1) != flip else _split_cols
    hi, nnz, bad = split(xc, 0 if x.dtype == np.float32 else 16, beta)
    return (hi.T if flip else hi), nnz, bad == 0


def slices(x: np.ndarray, beta: int, max_slices: int, axis: int = 1) -> list[np.ndarray] | None:
    """Split finite float32 x [m, k] row by row (axis=1; column by column with axis=0)
    into x = sum(slices) exactly (`split_top` on each remainder in turn, each remainder
    a float32 again: `split_top`'s docstring); None if more than max_slices are needed."""
    out: list[np.ndarray] = []
    r = np.array(x, dtype=np.float32)
    while r.any():
        if len(out) == max_slices:
            return None
        hi, _, _ = split_top(r, beta, axis)
        r = (r - hi).astype(np.float32)
        out.append(hi)
    return out


def exact_matmul_terms(a: np.ndarray, b: np.ndarray, prec: int, emin: int) -> np.ndarray:
    """exact_matmul term by term: every product of float32 a [m, k] and b [k, n] into the
    superaccumulator (`certified.exact_dots` on every element) -> float64 [m, n].  The
    path for operands whose slices would be too many, and the tests' oracle."""
    m, n = a.shape[0], b.shape[1]
    rows, cols = np.divmod(np.arange(m * n), n)
    return exact_dots(a, b, rows, cols, prec, emin).reshape(m, n)


def _dense(a, b, a1, b1, beta: int, prec: int, emin: int) -> np.ndarray:
    """Ozaki's slices all the way, continuing from the first splits a1 of a and b1 of b
    (the remainders are float32: `split_top`)."""
    a, b = _float32(a), _float32(b)
    sa = slices((a - a1).astype(np.float32), beta, _MAX_SLICE_PAIRS - 1)
    sb = slices((b - b1).astype(np.float32), beta, _MAX_SLICE_PAIRS - 1, axis=0)
    if sa is None or sb is None or (len(sa) + 1) * (len(sb) + 1) > _MAX_SLICE_PAIRS:
        return exact_matmul_terms(a, b, prec, emin)
    prods = np.stack([x @ y for x in (a1, *sa) for y in (b1, *sb)])  # [pairs, m, n], exact
    terms = prods.reshape(prods.shape[0], -1).T
    return exact_sum_rows(terms, prec, emin).reshape(a.shape[0], b.shape[1])


@one_signature("(int64[:], int64[:], int64[:], float64[:, :], float32[:, :], int64[:], "
               "float64[:], int64[:], float64[:, :], int64[:], int64[:], float64[:], int64, "
               "int64)", parallel=True)
def _round_block(rows, cols, col_pos, t1, a_at, a2_cols, a2_vals, a2_ptr, b1, b2_at, b2_cols,
                 b2_vals, prec, emin):
    """The elements rows x cols (parallel over chunks of 64 rows, one scratch each): the
    correction C = a @ b2 + a2 @ b1 and the sum of its terms' magnitudes, from the
    nonzeros of a2 (CSR: row i's are a2_ptr[i]:a2_ptr[i+1]) and of b2 (coordinates: the
    row's place among the columns of a in a_at [m, *], and the column, all among cols;
    col_pos maps a column to its place in cols), TwoSum(t1, C) and
    its certified rounding -> (rounded [len(rows), len(cols)] float64, flagged: left for
    the exact fallback).

    The bound on C's rounding error: zero when every addition was exact (TwoSum's error
    term zero each time; terms of few bits, as bf16 products are, often add exactly), which
    lets exact ties round to even without the fallback; else the float64 sum of n exact
    terms (the products are exact) errs by at most gamma_(n-1) = (n-1) u / (1 - (n-1) u)
    times the sum of their magnitudes, and the computed magnitude sum is low by at most
    that factor; (n + 1) u times it covers both and the rounding of that product for
    n < 2^24 (u = 2^-53)."""
    nc = cols.shape[0]
    out = np.empty((rows.shape[0], nc))
    flagged = np.empty((rows.shape[0], nc), np.bool_)
    for chunk in numba.prange((rows.shape[0] + 63) // 64):
        c = np.empty(nc)
        mag = np.empty(nc)
        cnt = np.empty(nc, np.int64)
        inexact = np.empty(nc, np.bool_)
        for r in range(64 * chunk, min(rows.shape[0], 64 * chunk + 64)):
            _round_row(r, rows[r], cols, col_pos, t1, a_at, a2_cols, a2_vals, a2_ptr, b1,
                       b2_at, b2_cols, b2_vals, prec, emin, c, mag, cnt, inexact, out,
                       flagged)
    return out, flagged


@numba.njit(cache=True, inline="always")
def _round_row(r, i, cols, col_pos, t1, a_at, a2_cols, a2_vals, a2_ptr, b1, b2_at, b2_cols,
               b2_vals, prec, emin, c, mag, cnt, inexact, out, flagged):
    """Row r of `_round_block` (row i of the operands), in the caller's scratch c, mag,
    cnt, inexact [len(cols)]."""
    nc = cols.shape[0]
    c[:] = 0.0
    mag[:] = 0.0
    cnt[:] = 0
    inexact[:] = False
    for z in range(a2_ptr[i], a2_ptr[i + 1]):
        t, v = a2_cols[z], a2_vals[z]
        for jj in range(nc):
            term = v * b1[t, cols[jj]]
            c[jj], d = two_sum(c[jj], term)
            inexact[jj] |= d != 0.0
            mag[jj] += abs(term)
            cnt[jj] += 1
    for z in range(b2_at.shape[0]):
        jj = col_pos[b2_cols[z]]
        term = np.float64(a_at[i, b2_at[z]]) * b2_vals[z]
        c[jj], d = two_sum(c[jj], term)
        inexact[jj] |= d != 0.0
        mag[jj] += abs(term)
        cnt[jj] += 1
    for jj in range(nc):
        s, e = two_sum(t1[i, cols[jj]], c[jj])
        err = mag[jj] * ((cnt[jj] + 1) * _U) if inexact[jj] else 0.0
        out[r, jj], certain = round_certified(s, e, err, prec, emin)
        flagged[r, jj] = not certain


def _fast(a, b, a1, b1, rows_c, cols_c, out: np.ndarray) -> None:
    """Into out: a1 @ b1 from BLAS, exact, rounded once to out's dtype where no correction
    reaches (`casts.rounded`); the rows of a2 = a - a1 and the columns of b2 = b - b1 with
    nonzeros (rows_c, cols_c) through `_round_block` and, where flagged,
    `certified.exact_dots`.  Only the lines of a and b that the correction reads are
    widened to float32."""
    m, n = a.shape[0], b.shape[1]
    dt = out.dtype
    if dt == np.float64:
        t1 = np.matmul(a1, b1, out=out)  # exact, see the module docstring
    else:
        t1 = a1 @ b1
        rounded(t1, dt, out=out)
    # The nonzeros of a2 and b2, formed and looked for only in their rows and columns with
    # any (np.nonzero over a whole transposed operand costs more than its BLAS product).
    if not rows_c.size and not cols_c.size:
        return
    a2_rows = _float32(a[rows_c]) - a1[rows_c]
    sub_r, a2c = np.nonzero(a2_rows)
    ptr = np.searchsorted(rows_c[sub_r], np.arange(m + 1))
    b2_cols = _float32(b[:, cols_c]) - b1[:, cols_c]
    b2r, sub_c = np.nonzero(b2_cols)
    b2c = cols_c[sub_c]
    # a's columns at the rows of b2's nonzeros (those terms' other factors), and where
    # each nonzero's is among them
    at, b2_at = np.unique(b2r, return_inverse=True)
    others = np.ones(m, np.bool_)
    others[rows_c] = False
    prec, emin = precision_of(dt)
    args = (t1, _float32(a[:, at]), a2c, a2_rows[sub_r, a2c], ptr, b1, b2_at.reshape(-1),
            b2c, b2_cols[b2r, sub_c], prec, emin)
    # Whole rows where a2 has nonzeros, then the other rows in the columns where b2 has:
    # each element once (out may be t1 itself), each block's b2 columns among its columns.
    for rows, cols in ((rows_c, np.arange(n)), (np.flatnonzero(others), cols_c)):
        if not rows.size or not cols.size:
            continue
        col_pos = np.full(n, -1, np.int64)
        col_pos[cols] = np.arange(cols.size)
        vals, flagged = _round_block(rows, cols, col_pos, *args)
        out[np.ix_(rows, cols)] = rounded(vals, dt)
        fr, fc = np.nonzero(flagged)
        if fr.size:
            (ui, i), (uj, j) = (np.unique(v, return_inverse=True) for v in (rows[fr], cols[fc]))
            out[ui[i], uj[j]] = rounded(exact_dots(_float32(a[ui]), _float32(b[:, uj]),
                                                   i.reshape(-1), j.reshape(-1), prec, emin),
                                        dt)


def _integer_bf16_matmuls(problems: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
                          ) -> list[bool]:
    """Into each out: a @ b exactly rounded for bf16 a, b on integer dot products
    (`bf16_matmul`, all the problems in one round of its kernels per phase), the elements
    it leaves (NaN) through `certified.exact_dots` -> per problem whether it is done;
    False, nothing written, for operands with a non-finite value or more residuals than
    the correction handles cheaply (the same rule as the fast path's: the split paths
    take them, the same bits)."""
    d = bf16_matmul.WINDOW
    taken, mine = [], []
    for (a, b, out), ((ea, res_a), (eb, res_b), finite) in zip(
            problems, bf16_matmul.operand_lines([(a, b) for a, b, _ in problems], d),
            strict=True):
        m, k, n = a.shape[0], a.shape[1], b.shape[1]
        taken.append(finite and res_a.sum() * n + res_b.sum() * m <= _SPARSE_FRACTION * m * n * k)
        if taken[-1]:
            mine.append((a, ea, b, eb, bf16_matmul.residual_lists(a, 1, ea, res_a, d),
                         bf16_matmul.residual_lists(b, 0, eb, res_b, d), out))
    for (a, _, b, _, _, _, out), flagged in zip(mine, bf16_matmul.matmul(mine, d), strict=True):
        rows = np.flatnonzero(flagged)
        if rows.size:  # the elements left NaN: finite operands give no NaN of their own
            fr, fc = np.nonzero(np.isnan(out[rows]))
            (ui, i), (uj, j) = (np.unique(v, return_inverse=True) for v in (rows[fr], fc))
            out[ui[i], uj[j]] = rounded(exact_dots(_float32(a[ui]), _float32(b[:, uj]),
                                                   i.reshape(-1), j.reshape(-1),
                                                   *precision_of(out.dtype)), out.dtype)
    return taken


def _finite_matmul(a: np.ndarray, b: np.ndarray, split_a, split_b, beta: int,
                   out: np.ndarray) -> None:
    """Into out: a @ b exactly rounded for finite float32 a, b and their splits
    (`split_top`: (a1, nnz_a, _) along rows, (b1, nnz_b, _) along columns)."""
    m, n, k = a.shape[0], b.shape[1], a.shape[1]
    (a1, nnz_a, _), (b1, nnz_b, _) = split_a, split_b
    if nnz_a.sum() * n + nnz_b.sum() * m > _SPARSE_FRACTION * m * n * k:
        out[...] = _dense(a, b, a1, b1, beta, *precision_of(out.dtype))
    else:
        _fast(a, b, a1, b1, np.flatnonzero(nnz_a), np.flatnonzero(nnz_b), out)


def _float32(x: np.ndarray) -> np.ndarray:
    """The float32 image of float32 or bf16 values (exact; x itself when float32)."""
    return x.astype(np.float32, copy=False)


UNSCALED_DTYPES = (np.dtype(np.float32), BF16)  # the operands the exactness argument covers


def check_unscaled(name: str, x: ArrayLike) -> np.ndarray:
    """x as an array, or ValueError naming it unless it is float32 or bfloat16."""
    x = np.asarray(x)
    if x.dtype not in UNSCALED_DTYPES:
        raise ValueError(f"{name} must be float32 or bfloat16, got {x.dtype}")
    return x


def exact_matmul(a: np.ndarray, b: np.ndarray, out_dtype: DTypeLike,
                 out: np.ndarray | None = None) -> np.ndarray:
    """Exact a @ b for float32 or bfloat16 a [m, k], b [k, n] (any memory layout), rounded
    once to out_dtype (float64, float32 or bfloat16) -> [m, n] of out_dtype, written into
    `out` (C-contiguous, of that shape and dtype) when given.  Non-finite inputs give the
    IEEE values of the elements they reach (module docstring)."""
    dt = np.dtype(out_dtype)
    a, b = _operands(a, b)
    if out is None:
        out = np.empty((a.shape[0], b.shape[1]), dt)
    elif out.dtype != dt:
        raise ValueError(f"out must be {dt}, got {out.dtype}")
    exact_matmuls([(a, b, out)])
    return out


def _operands(a: ArrayLike, b: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """a and b as arrays, or ValueError unless they are float32 or bfloat16 [m, k] and
    [k, n]."""
    a, b = check_unscaled("a", a), check_unscaled("b", b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"expected a [m,k] and b [k,n], got {a.shape} and {b.shape}")
    return a, b


def exact_matmuls(products: Sequence[tuple[ArrayLike, ArrayLike, np.ndarray]]) -> None:
    """`exact_matmul(a, b, out.dtype, out=out)` for each (a, b, out), out C-contiguous
    [m, n] of float64, float32 or bfloat16 (ValueError otherwise, nothing written); the
    integer path's kernels run for all of them at once, one round of the thread pool per
    phase (`bf16_matmul`: tgmm and dgrad make a product per group)."""
    checked = []
    for a, b, out in products:
        precision_of(out.dtype)  # ValueError for a format without exact rounding
        a, b = _operands(a, b)
        shape = (a.shape[0], b.shape[1])
        if out.shape != shape or not out.flags.c_contiguous:
            raise ValueError(f"out must be C-contiguous {out.dtype} {shape}, got {out.shape}")
        checked.append((a, b, out))
    rest = []
    for a, b, out in checked:
        if out.size == 0 or a.shape[1] == 0:  # a sum of no terms
            out[...] = 0
        else:
            rest.append((a, b, out))
    on_ints = [bf16_matmul.AVAILABLE and a.dtype == b.dtype == BF16
               and a.shape[1] <= bf16_matmul.MAX_K for a, b, _ in rest]
    # Casts past the output's range give inf (the IEEE rounding), and the non-finite
    # elements' NaNs are the values asked for: neither is worth a warning.
    with np.errstate(over="ignore", invalid="ignore"):
        done = iter(_integer_bf16_matmuls([p for p, i in zip(rest, on_ints, strict=True) if i]))
        for p, i in zip(rest, on_ints, strict=True):
            if not (i and next(done)):
                _split_matmul(*p)


def _split_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """Into out: a @ b exactly rounded on float64 BLAS (the fast, dense and term paths;
    non-finite values as the module docstring says), for nonempty a, b."""
    dt, k = out.dtype, a.shape[1]
    beta = slice_bits(k)
    split_a, split_b = split_top(a, beta, axis=1), split_top(b, beta, axis=0)
    if split_a[2] and split_b[2]:
        _finite_matmul(a, b, split_a, split_b, beta, out)
        return
    finite_a, finite_b = np.isfinite(a), np.isfinite(b)
    a0, b0 = (np.where(f, x, np.zeros((), x.dtype)) for f, x in ((finite_a, a),
                                                                   (finite_b, b)))
    _finite_matmul(a0, b0, split_top(a0, beta, axis=1), split_top(b0, beta, axis=0),
                   beta, out)
    bad = ~finite_a.all(axis=1)[:, None] | ~finite_b.all(axis=0)[None, :]
    out[bad] = (to_float64(a) @ to_float64(b))[bad].astype(dt)
