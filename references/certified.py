"""Certified rounding: the correctly rounded value of a number known only to within a
proven error bound, with a flag for the rare cases the bound cannot decide.

The fast exact paths (`references.matmul`, the exact recipe of `references.gmm`) know the
true value t as an unevaluated float64 pair s + e plus a proven bound E with
|t - (s + e)| <= E.  `round_certified` returns r = RN_p(s) (round to nearest even at p
significant bits, subnormals below 2^emin) and whether r = RN_p(t) is certain.  Its
argument:

* r is computed exactly: with q = max(floor(log2|s|), emin) - p + 1 the exponent of the
  last bit kept, 2^-941 <= |s 2^-q| < 2^p for nonzero s and the formats here (float64,
  float32, bfloat16: emin - p + 1 <= -133), so scaling by a power of two is exact, `rint`
  rounds half to even, so r = rint(s 2^-q) 2^q is exactly RN_p(s).  d = s - r is exact: both are
  multiples of ulp64(s) (r of 2^q >= ulp64(s) for p <= 53) and |d| <= 2^(q-1), at most
  53 bits of ulp64(s).
* Every real within h of r, strictly, rounds to r, where h is half the distance from r to
  its nearer neighbour at p bits: 2^(q-1), or 2^(q-2) when r is a power of two (the
  neighbour towards zero may sit in a finer binade).  The distance |t - r| is at most
  |d + e| + E; the check computes it rounded upwards with margin (each float64 operation
  errs by at most 2^-53 relative; the factors 1 + 2^-51 cover the three of them) and asks
  it to be < h.
* If E = 0 and e = 0, t = s exactly and r = RN_p(t) even at a tie: certain (an exact zero
  gives +0.0, as the superaccumulator's rounding does).  A result that rounds to zero from
  a nonzero t is never certain: its sign is t's, which s need not carry.

Overflow needs no case of its own: r is the rounding with an unbounded exponent, and the
caller's cast of r to the output format (2^128 -> inf for float32) is the IEEE overflow
rule, the same cast the exact fallback's results get.  A non-finite s or E is never
certain.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from fp8check.references.exact import ACC_SIZE, acc_add, acc_round, two_product
from fp8check.references.jit import one_signature

_MARGIN = 1.0 + 2.0**-51
_FRACTION = (1 << 52) - 1  # a float64's fraction bits


@numba.njit(cache=True, inline="always")
def _scaled(x, n):
    """x 2^n, exactly where x 2^n is a float64 (the scalings here): a multiplication by
    the power of two built from its bits when 2^n is a normal float64, else ldexp."""
    if -1022 <= n <= 1023:
        return x * np.int64((n + 1023) << 52).view(np.float64)
    return math.ldexp(x, n)


@numba.njit(cache=True, inline="always")
def round_certified(s, e, err, p, emin):
    """(RN_p(s) as float64, whether it is RN_p(t) for every t with |t - (s+e)| <= err)."""
    if not (math.isfinite(s) and math.isfinite(e) and math.isfinite(err)):
        return s, False
    if s == 0.0 and e == 0.0 and err == 0.0:
        return 0.0, True
    # floor(log2 |s|) from the exponent field; a float64 subnormal s (field 0, -1023 here)
    # is below every format's 2^emin, where max() puts it, as it does s = 0
    ex = ((np.float64(s).view(np.int64) >> 52) & 0x7FF) - 1023
    q = max(ex, emin) - p + 1
    r = _scaled(np.rint(_scaled(s, -q)), q)
    if e == 0.0 and err == 0.0:
        return r, True  # t = s: rint keeps s's sign even when r is zero
    if r == 0.0:
        return r, False
    h = _scaled(0.5, q)
    bits = np.float64(r).view(np.int64)
    frac = bits & _FRACTION
    if (frac == 0) if (bits >> 52) & 0x7FF else ((frac & (frac - 1)) == 0):  # a power of 2
        h *= 0.5
    off = (s - r) + e
    return r, abs(off) * _MARGIN + err * _MARGIN < h


@one_signature("(float32[:, :], float32[:, :], int64[:], int64[:], int64, int64)",
               parallel=True)
def exact_dots(a, b, rows, cols, p, emin):
    """The exact dot products a[rows[i], :] . b[:, cols[i]], rounded once to p bits
    (subnormals below 2^emin), for float32 a [m, k] and b [k, n] (each product exact in
    float64: 24 + 24 bits) -> float64 [len(rows)]."""
    out = np.empty(rows.shape[0], np.float64)
    for c in numba.prange((rows.shape[0] + 63) // 64):
        acc = np.zeros(ACC_SIZE, np.int64)
        for i in range(64 * c, min(rows.shape[0], 64 * (c + 1))):
            for t in range(a.shape[1]):
                acc_add(acc, np.float64(a[rows[i], t]) * np.float64(b[t, cols[i]]))
            out[i] = acc_round(acc, p, emin)
    return out


@numba.njit(cache=True, inline="always")
def scaled_terms_exact(p_hi, p_lo, sa, sb, i, j, p, emin):
    """The exact sum over K blocks of (p_hi + p_lo)[kb, i, j] * sa[i, kb] * sb[kb, j],
    rounded once: every term split exactly by two_product into the superaccumulator."""
    acc = np.zeros(ACC_SIZE, np.int64)
    has_lo = p_lo.shape[0] != 0
    for kb in range(p_hi.shape[0]):
        s = np.float64(sa[i, kb]) * np.float64(sb[kb, j])  # exact: 24 + 24 bits
        for part in (p_hi[kb, i, j], p_lo[kb, i, j] if has_lo else 0.0):
            hi, lo = two_product(part, s)
            acc_add(acc, hi)
            acc_add(acc, lo)
    return acc_round(acc, p, emin)
