"""Exact arithmetic kernels the references are built from (numba, nopython).

* `fma_f32(a, b, c)`: float32 fused multiply-add, correctly rounded (RNE) once.
* `ExactSum`: a fixed-point superaccumulator (Kulisch style) that adds float64 terms with
  no rounding at all and rounds the total once, correctly, to a chosen precision.

Why these are exact:

fma_f32.  a, b are float32 (24-bit significands), so p = a*b has at most 48 significant bits
and is exact in float64 (53 bits; the exponent range of float64 covers every product of two
float32).  s = RN64(p + c) and the TwoSum error e = (p + c) - s are exact (Knuth).  RN32(s)
equals RN32(p + c) unless s is *exactly* halfway between two float32 neighbours while e != 0
(the classic double-rounding case): then the true value lies off the tie, on the side of e,
and we take the neighbour on that side.  In every other case s and p + c round to the same
float32: if s is a float32 value, |e| <= ulp64(s)/2 is far smaller than half a float32 ulp;
otherwise s and p + c lie strictly on the same side of the same float32 midpoint, because a
float32 midpoint is itself a float64 value and RN64 never crosses a float64 value.

ExactSum.  A float64 x = M * 2^E with |M| < 2^53 an integer.  The accumulator holds 32-bit
digits in int64 cells covering 2^EMIN .. 2^EMAX; adding x adds the integer M shifted to its
place, split over at most three cells, with exact integer arithmetic.  Each cell takes less
than 2^32 per term and per digit position, so up to 2^28 terms cannot overflow an int64
cell.  Rounding normalises the digits (carry propagation, two's complement for negatives)
and rounds the top bits to `p` significant bits with a sticky bit for everything below,
honouring the target format's subnormal range: it is the textbook round-to-nearest-even of
an exactly known integer.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from fp8check.bits import bits_f64
from fp8check.references.jit import one_signature

# Superaccumulator geometry: values from 2^EMIN upward in 32-bit digits.  float64 terms
# reach 2^-1074 .. 2^1024; the products the references add stay far inside that.
EMIN = -1152
NCELLS = (1024 + 64 - EMIN) // 32 + 4
# Two bookkeeping slots after the digits record the window of cells in use, so rounding
# touches only those (a dot product's terms span a few cells of the 74): acc[NCELLS] is
# one past the highest cell written plus a carry cell, acc[NCELLS + 1] is NCELLS minus
# the lowest; both 0 when empty, so np.zeros(ACC_SIZE) is an empty accumulator.
ACC_SIZE = NCELLS + 2
_MASK32 = (1 << 32) - 1
_FRAC52 = (1 << 52) - 1

_F32_TINY = 2.0**-126
_LOW29 = (1 << 29) - 1  # float64 fraction bits below float32's 23
_HALF29 = 1 << 28
_SPLIT25 = 2.0**28 + 1.0  # Veltkamp constant that keeps the top 53 - 28 = 25 bits

# (precision in significant bits, exponent of the smallest normal) for each output format.
PRECISION = {
    np.dtype(np.float64): (53, -1022),
    np.dtype(np.float32): (24, -126),
}


@numba.njit(cache=True, inline="always")
def may_double_round_f32(s):
    """Whether RN32(s) can differ from RN32(x) for some x with RN64(x) = s: s is exactly
    halfway between two float32 normals (its 29 bits below float32 precision are 1000...0)
    or lies in float32's subnormal range, where midpoints have fewer bits.  A vectorizable
    screen for the exact fallback: false for every other finite float64 (module doc)."""
    return (bits_f64(s) & _LOW29) == _HALF29 or abs(s) < _F32_TINY


@numba.njit(cache=True, inline="always")
def _is_f32_midpoint(s, r):
    """Whether float64 s (not itself a float32; r = RN32(s)) is exactly halfway between
    two float32 values."""
    if abs(s) >= _F32_TINY:
        # In the float32 normal range a midpoint has exactly 25 significant bits: s is one
        # iff splitting it at 25 bits (Veltkamp) leaves it unchanged.
        c = s * _SPLIT25
        return c - (c - s) == s
    # Subnormal float32 range: compare the distances to both neighbours directly.
    r2 = np.nextafter(r, np.float32(np.inf) if s > np.float64(r) else np.float32(-np.inf))
    return abs(s - np.float64(r)) == abs(np.float64(r2) - s)


@numba.njit(cache=True, inline="always")
def _break_tie(s, r, e):
    """RN32 of s + e where s is a float32 midpoint and e != 0: the neighbour on e's side."""
    other = np.nextafter(r, np.float32(-np.inf) if np.float64(r) > s else np.float32(np.inf))
    return max(r, other) if e > 0.0 else min(r, other)


@numba.njit(cache=True)
def round_pair_f32(s, e):
    """RN32(s + e) for a float64 pair with s = RN64(s + e) and e the exact remainder.

    RN32(s) is right unless s is exactly a float32 midpoint and e != 0 (see module doc).
    """
    r = np.float32(s)
    if e == 0.0 or not math.isfinite(s) or np.float64(r) == s or not _is_f32_midpoint(s, r):
        return r
    return _break_tie(s, r, e)


@numba.njit(cache=True, inline="always")
def two_sum(a, b):
    """(s, e) with s = RN64(a + b) and s + e == a + b exactly (Knuth's TwoSum)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _fma_f32(a, b, c):
    p = np.float64(a) * np.float64(b)  # exact: 24 + 24 bits
    c64 = np.float64(c)
    s = p + c64
    r = np.float32(s)
    # The TwoSum remainder is needed only at an exact float32 midpoint (rare): test first.
    if not math.isfinite(s) or np.float64(r) == s or not _is_f32_midpoint(s, r):
        return r
    e = two_sum(p, c64)[1]  # s + e == p + c exactly
    return r if e == 0.0 else _break_tie(s, r, e)


fma_f32_scalar = numba.njit(cache=True)(_fma_f32)
_fma_f32_ufunc = numba.vectorize(["float32(float32, float32, float32)"], cache=True)(_fma_f32)


def fma_f32(a, b, c) -> np.ndarray:
    """Elementwise float32 fused multiply-add RNE(a*b + c), one rounding (broadcasting).

    Inputs are cast to float32 first; pass float32 to avoid a silent rounding (float64
    input raises ValueError).
    """
    arrs = [np.asarray(v) for v in (a, b, c)]
    if any(v.dtype == np.float64 for v in arrs):
        raise ValueError("fma_f32: float64 operands would be rounded; pass float32")
    return _fma_f32_ufunc(*[v.astype(np.float32) for v in arrs])


@numba.njit(cache=True, inline="always")
def acc_add(acc, x):
    """Add float64 `x` exactly to the superaccumulator `acc` (int64[ACC_SIZE], zeros when
    new)."""
    if x == 0.0:
        return
    # x = sgn * mi * 2^(pos + EMIN) from its bits: mi the 53-bit significand (the implicit
    # bit set for normals), the exponent field 0 meaning a subnormal with exponent -1074.
    bits = bits_f64(x)
    field = (bits >> 52) & 0x7FF
    mi = bits & _FRAC52
    if field:
        mi |= _FRAC52 + 1
    sgn = np.int64(-1) if bits < 0 else np.int64(1)
    pos = max(field, 1) - 1075 - EMIN
    cell = pos >> 5
    sh = pos & 31
    lo = (mi & _MASK32) << sh  # < 2^63
    hi = (mi >> 32) << sh  # < 2^53
    acc[cell] += sgn * (lo & _MASK32)
    acc[cell + 1] += sgn * ((lo >> 32) + (hi & _MASK32))
    acc[cell + 2] += sgn * (hi >> 32)
    acc[NCELLS] = max(acc[NCELLS], cell + 4)
    acc[NCELLS + 1] = max(acc[NCELLS + 1], NCELLS - cell)


@numba.njit(cache=True, inline="always")
def two_product(a, b):
    """(p, err) with p = RN64(a*b) and p + err == a*b exactly (Dekker; |a|, |b| < 2^995)."""
    p = a * b
    c = 134217729.0 * a
    ah = c - (c - a)
    al = a - ah
    c = 134217729.0 * b
    bh = c - (c - b)
    bl = b - bh
    err = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, err


@numba.njit(cache=True)
def acc_round(acc, p, emin):
    """Round the exact value held in `acc` to `p` significant bits (RNE, subnormals below
    2^emin), return it as float64, and clear `acc` for reuse.  Exact zero gives +0.0.

    Only the window of cells in use is read: below it every cell is zero, and above it
    too except for carries, which the window's top cell (one past the highest written)
    absorbs: each written cell holds less than 2^60 in magnitude (fewer than 2^28 terms),
    so its carry is below 2^28 and the top cell ends as the signed leading digit."""
    top = acc[NCELLS] - 1
    if top < 0:
        return 0.0
    low = NCELLS - acc[NCELLS + 1]
    acc[NCELLS] = 0
    acc[NCELLS + 1] = 0
    for i in range(low, top):  # carry-propagate to digits in [0, 2^32)
        c = acc[i] >> 32
        acc[i] -= c << 32
        acc[i + 1] += c
    sign = 1.0
    if acc[top] < 0:
        sign = -1.0
        for i in range(low, top + 1):
            acc[i] = -acc[i]
        for i in range(low, top):
            c = acc[i] >> 32
            acc[i] -= c << 32
            acc[i + 1] += c
    h = top
    while h >= low and acc[h] == 0:
        h -= 1
    if h < low:
        return 0.0
    t = acc[h]
    b = math.frexp(float(t))[1]  # bit length of the digit t in [1, 2^32): exact in float64
    d1 = acc[h - 1] if h - 1 >= low else 0
    d2 = acc[h - 2] if h - 2 >= low else 0
    # 64-bit window W of the leading bits (MSB set) as two 32-bit halves, plus sticky.
    w = (np.uint64(t) << np.uint64(64 - b)) | (np.uint64(d1) << np.uint64(32 - b))
    w = w | (np.uint64(d2) >> np.uint64(b))
    sticky = (d2 & ((1 << b) - 1)) != 0
    for i in range(low, h - 2):
        if acc[i] != 0:
            sticky = True
    for i in range(low, top + 1):
        acc[i] = 0
    msb = 32 * h + b - 1 + EMIN  # exponent of the leading bit
    q = max(msb - (p - 1), emin - (p - 1))  # exponent of the result's last kept bit
    keep = msb - q + 1
    if keep <= 0:
        # Below half the smallest subnormal step unless keep == 0 (value in [2^(q-1), 2^q)).
        if keep == 0 and (w > np.uint64(1 << 63) or sticky):
            return sign * math.ldexp(1.0, q)
        return sign * 0.0
    shift = 64 - keep
    r = w >> np.uint64(shift)
    rem = w & ((np.uint64(1) << np.uint64(shift)) - np.uint64(1))
    half = np.uint64(1) << np.uint64(shift - 1)
    if rem > half or (rem == half and (sticky or (r & np.uint64(1)) == np.uint64(1))):
        r += np.uint64(1)
    return sign * math.ldexp(float(r), q)


def precision_of(dtype) -> tuple[int, int]:
    """(significant bits, smallest normal exponent) of float64, float32 or bfloat16."""
    import ml_dtypes

    dt = np.dtype(dtype)
    if dt == np.dtype(ml_dtypes.bfloat16):
        return 8, -126
    if dt in PRECISION:
        return PRECISION[dt]
    raise ValueError(f"no exact rounding to {dt}; expected float64, float32 or bfloat16")


@one_signature("(float64[:, :], int64, int64)", parallel=True)
def exact_sum_rows(terms, p, emin):
    """The exact sum of each row of float64 terms [R, T] (any strides), rounded once to p
    bits with subnormals below 2^emin (parallel over chunks of rows)."""
    rows = terms.shape[0]
    out = np.empty(rows, np.float64)
    chunk = 1024
    for c in numba.prange((rows + chunk - 1) // chunk):
        acc = np.zeros(ACC_SIZE, np.int64)
        for i in range(c * chunk, min(rows, (c + 1) * chunk)):
            for t in range(terms.shape[1]):
                acc_add(acc, terms[i, t])
            out[i] = acc_round(acc, p, emin)
    return out


def exact_sum(terms: np.ndarray, dtype=np.float64) -> np.ndarray:
    """Correctly rounded (RNE, once) sum over the last axis of finite float64 `terms`.

    Returns float64 values that are exactly representable in `dtype` (float64, float32 or
    bfloat16); cast them to `dtype` without further rounding.
    """
    terms = np.asarray(terms, dtype=np.float64)
    if not np.isfinite(terms).all():
        raise ValueError("exact_sum: terms must be finite")
    p, emin = precision_of(dtype)
    flat = terms.reshape(-1, terms.shape[-1]) if terms.ndim else terms.reshape(1, 1)
    return exact_sum_rows(np.ascontiguousarray(flat), p, emin).reshape(terms.shape[:-1])
