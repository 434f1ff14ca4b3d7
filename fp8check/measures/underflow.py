"""The error bound's absolute term for float32 underflow and for flush-to-zero (FTZ).

`metrics.bound_ratio` bounds a valid kernel's error with Higham's relative model
fl(x op y) = (x op y)(1 + d), |d| <= u.  A result below float32's smallest normal 2^-126
breaks it; the standard model with underflow (Higham, Accuracy and Stability, sec. 2.1)
is

    fl(x op y) = (x op y)(1 + d) + e,   |d| <= u,  |e| <= ETA = 2^-150,  d e = 0,

with e = 0 for additions and subtractions (a sum that lands below 2^-126 is a multiple of
2^-149 of at most 24 bits: exact).  Only multiplications (and fma, whose product part is
one) make an e.  An e made at a multiplication node is then carried by every operation
applied after it: multiplied by the remaining factors of its term (its amplification A)
and by at most n roundings (1 + d), so its contribution is at most |e| A (1 + gamma_n).
The bound therefore gains (1 + gamma_n) W, W = sum over the nodes of |e|max A, which
`UnderflowModel.term` returns and `metrics.bound_ratio(..., underflow=W)` adds.

A kernel that flushes subnormals (FTZ: XLA:CPU and TPUs do; numpy, torch CPU and CUDA by
default do not) replaces every result below 2^-126 by 0 and reads subnormal inputs as 0:
there fl(x op y) = (x op y)(1 + d) + e with |e| < FLUSH = 2^-126 for EVERY operation,
additions included (a flushed sum loses up to 2^-126 too), and for the final conversion
to the output dtype.

Which nodes count, per output element, for the K terms of a matmul:

* unscaled contracts (gmm, tgmm: products of two bf16 values, then sums): every product is
  the root of its term (nothing multiplies it afterwards, A = 1), so W = K ETA (`roots`
  = K).  With FTZ: K products, K - 1 additions and the output conversion, W = 2K FLUSH;
  a subnormal bf16 input read as 0 loses |a b| < 2^-126 |b| (or |a|), so when an input is
  subnormal W gains K (max|a| + max|b|) FLUSH (`nonroot_amp`).
* gmm-fp8 (terms sa sb qa qb, sa and sb float32 block scales, qa, qb e4m3/e5m2 values;
  a nonzero product qa qb is a multiple of the granule g = (smallest fp8 subnormal)^2,
  2^-18 for e4m3 and 2^-32 for e5m2, far above 2^-126, and exact): a valid order forms
  each term, or the term of a 128-wide block partial P_b = sum qa qb (a float32
  multiple of g), with at most three multiplications among {sa, sb, qa, qb} or
  {sa, sb, P_b}; the last is the term's root (A = 1, at most K roots).  Every other
  product is a NON-ROOT: sa sb (DeepGEMM's RN(sa sb)), sa qa, sb P_b, ...; its exact
  value is a product of a nonempty subset S of the scales and a Q among
  {1, qa, qb, qa qb, P_b}, all multiples of g, so when nonzero it is at least s_lo g with
  s_lo = min(min sa, min sb, min sa min sb, 1).
  - `nonroot_normal` when s_lo g >= 2^-125: every non-root's exact value is >= 2^-125
    and its computed value (through at most two roundings, (1 - u)^2 > 1/2) >= 2^-126:
    normal, no e, and not flushed by FTZ either.  Then W = K ETA; with FTZ, K roots and
    K - 1 additions plus the conversion, each addition amplified by the scales applied
    after it (a partly scaled sum such as sum RN(sb qa qb), then times sa, may cancel
    below 2^-126 and flush): at most 2 S_a S_b (`sum_amp`, S = max(1, max s)), so
    W = K (1 + 2 S_a S_b) FLUSH.
  - `nonroot_exact` (no FTZ) also when every scale is a power of two and
    s_lo g >= 2^-149 (e4m3: s_lo >= 2^-131): a non-root is then S Q with S a power of two
    >= s_lo and Q a float32 multiple of g (qa, qb, qa qb exact; P_b a sum of multiples,
    rounded to float32, stays one), so S Q has Q's significand and lowest bit
    >= 2^-149: it is a float32, exact (this covers DeepGEMM's RN(sa sb) when sa sb is a
    subnormal power of two).  W = K ETA.
  - otherwise the conservative `nonroot_amp`: at most 3K element-level nodes, 2 per
    block for block-level ones and, with FTZ, 2 scale reads per term (a subnormal scale
    read as 0): at most 6K nodes; each is amplified by at most three remaining computed
    factors, bounded by 2 S_a S_b Q_a Q_b 128 (S = max(1, max s), Q = max(1, max |q|),
    128 for a block partial as the remaining factor, 2 for computed versus exact values:
    (1 + gamma_130)(1 + u)^2 (1 + 2^-126) < 2 for u <= 2^-10, which `term` checks).
    W = ETA (K + 6K A) or FLUSH (K (1 + 2 S_a S_b) + 6K A), A = 256 S_a S_b Q_a Q_b.
    This is loose by design: it applies only where scales are tiny (s_lo g < 2^-125)
    and, without FTZ, not powers of two; of the gate's cases only the ci `subnormal`
    ones fall here, and only for a kernel that flushes (whose results there say the
    subnormal range was not checked precisely).
  In the first two cases the roots are exact or normal too (sa sb Q, by the same
  arguments), so W = K ETA is slack there, kept so that fma forms need no separate
  argument.

On the gate's ordinary data (scales >= 2^-30) W is at most K 2^-150, or
K (1 + 2 S_a S_b) 2^-126 with FTZ: far below any nonzero output, so the bound is
unchanged there up to that.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from fp8check.formats import get_format
from fp8check.references.casts import to_float64

ETA = 2.0**-150
"""Largest |e| of one float32 multiplication whose result underflows (half the smallest
subnormal 2^-149)."""

FLUSH = 2.0**-126
"""Largest error of one flushed float32 result or input (|r| < 2^-126 becomes 0)."""

MIN_NORMAL = 2.0**-126
_MAX_U = 2.0**-10  # the conservative amplification's factor 2 holds for u <= 2^-10
_CODE_CHUNK = 1 << 14  # codes scanned between two looks for the largest finite one
_HALF = 128  # a one-byte format's codes with the sign bit clear: 0..127 (128..255 negate them)


@dataclass(frozen=True)
class UnderflowModel:
    """What the error bound needs about one problem's evaluation to cover underflow.

    roots: multiplications per output element whose result nothing multiplies afterwards
        (one per term at most: K).
    nonroot_exact: every other multiplication of a valid order is exact in float32
        (subnormal or not) or normal.
    nonroot_normal: every other multiplication, and every input, is 0 or >= 2^-126 in
        magnitude (so FTZ flushes none of them).
    nonroot_amp: upper bound of the summed amplification of the other nodes, used where
        the flag for the mode is False (see the module docstring).
    sum_amp: upper bound of the factors applied after an addition (1 for the unscaled
        contracts, whose sums are never scaled).
    subnormal_free: every input and every nonzero product a valid order forms, roots
        included, is >= 2^-125: FTZ changes no product, only a sum that cancels below
        2^-126 (covered by the term).  Where it is False, a flushing kernel's output in
        the subnormal range differs from IEEE arithmetic by design, and the criteria
        that compare with IEEE results (error_ratio, bias_z, bit_exact, impact) are
        reported for it, not gated (`layers.op.criteria`).
    """

    roots: int
    nonroot_exact: bool
    nonroot_normal: bool
    nonroot_amp: float
    sum_amp: float
    subnormal_free: bool

    def term(self, *, ftz: bool, u: float) -> float:
        """W in the output's units (>= 0): the absolute error before the (1 + gamma_n)
        of `metrics.bound_ratio`; `ftz` when the kernel flushes subnormals, `u` its
        accumulator's unit roundoff (ValueError above 2^-10 where the conservative
        amplification is needed: its factor 2 is not proven there)."""
        conservative = not (self.nonroot_normal if ftz else self.nonroot_exact)
        if conservative and not 0 < u <= _MAX_U:
            raise ValueError(f"underflow term: needs 0 < u <= 2^-10, got u={u!r}")
        extra = self.nonroot_amp if conservative else 0.0
        if ftz:
            # the roots, and the K - 1 additions and the output conversion, each flushing
            # less than 2^-126, the additions' losses amplified by up to sum_amp
            return FLUSH * (self.roots * (1.0 + self.sum_amp) + extra)
        return ETA * (self.roots + extra)


def unscaled_model(lhs: np.ndarray, rhs: np.ndarray, k: int) -> UnderflowModel:
    """The model of an unscaled (bf16 or f32 operand) matmul with at most k products per
    output: every product is a root; a subnormal input is a flush under FTZ."""
    mags = [_finite_magnitudes(v) for v in (lhs, rhs)]
    peak = [float(np.max(a, initial=0.0)) for a in mags]
    least = [float(np.min(a[a > 0], initial=1.0)) for a in mags]
    subnormal_input = min(least) < MIN_NORMAL
    return UnderflowModel(roots=k, nonroot_exact=True, nonroot_normal=not subnormal_input,
                          nonroot_amp=k * (peak[0] + peak[1]) if subnormal_input else 0.0,
                          sum_amp=1.0,
                          subnormal_free=least[0] * least[1] >= 2.0 * MIN_NORMAL)


def fp8_model(lq: Any, rq: Any, k: int) -> UnderflowModel:
    """The model of a gmm-fp8 problem on QTensors lq [M,K] and rq [G,K,N] (K terms per
    output; see the module docstring for the non-root conditions)."""
    sa, sb = _finite_magnitudes(lq.scales), _finite_magnitudes(rq.scales)
    sa_min, sb_min = float(np.min(sa, initial=1.0)), float(np.min(sb, initial=1.0))
    s_lo = min(sa_min, sb_min, sa_min * sb_min, 1.0)  # float64 product of two f32: exact
    pow2 = bool(np.all(np.frexp(sa)[0] == 0.5) and np.all(np.frexp(sb)[0] == 0.5))
    granule = get_format(lq.fmt).smallest_subnormal * get_format(rq.fmt).smallest_subnormal
    normal = s_lo * granule >= 2.0 * MIN_NORMAL
    peaks = [max(1.0, float(np.max(sa, initial=0.0))), max(1.0, float(np.max(sb, initial=0.0))),
             max(1.0, _finite_peak(lq.values)), max(1.0, _finite_peak(rq.values))]
    amp = 6.0 * k * 256.0 * peaks[0] * peaks[1] * peaks[2] * peaks[3]
    # a root is sa sb Q with |Q| >= granule when nonzero
    free = normal and sa_min * sb_min * granule >= 2.0 * MIN_NORMAL
    return UnderflowModel(roots=k, nonroot_exact=normal or (pow2 and s_lo * granule >= ETA * 2),
                          nonroot_normal=normal, nonroot_amp=amp,
                          sum_amp=2.0 * peaks[0] * peaks[1], subnormal_free=free)


_PEAK_CHUNK = 1 << 22  # elements per step of `_finite_peak`: 32 MiB of float64


def _finite_peak(v: Any) -> float:
    """max |v| over v's finite elements (0.0 when none), in float64: for an fp8 operand
    from its codes (`_sign_magnitude_order`), else a chunk at a time: production operands
    have 10^8 and more elements, and a float64 copy of a whole one (with its abs and
    finite mask) took gigabytes."""
    flat = np.asarray(v).reshape(-1)
    order = _sign_magnitude_order(flat.dtype)
    if order is not None:
        magnitudes, finite_codes = order
        return float(magnitudes[_largest_finite_code(flat.view(np.uint8), finite_codes)])
    peak = 0.0
    for i in range(0, flat.size, _PEAK_CHUNK):
        peak = max(peak, float(np.max(_finite_magnitudes(flat[i:i + _PEAK_CHUNK]),
                                      initial=0.0)))
    return peak


@functools.cache
def _sign_magnitude_order(dtype: np.dtype) -> tuple[np.ndarray, int] | None:
    """For a one-byte float format laid out sign and magnitude with its magnitudes in code
    order (e4m3fn, e5m2): (|value| of the codes 0..127 as float64, L) where the codes
    whose low seven bits are below L are exactly the finite ones and |value| grows with
    those bits; None for any other dtype."""
    if dtype.itemsize != 1 or dtype.kind in "iub":
        return None
    values = to_float64(np.arange(256, dtype=np.uint8).view(dtype))
    finite = np.isfinite(values)
    limit = int(np.argmin(finite[:_HALF])) if not finite[:_HALF].all() else _HALF
    magnitudes = np.abs(values[:_HALF])
    ordered = (np.all(finite[:limit]) and not finite[limit:_HALF].any()
               and np.array_equal(finite[:_HALF], finite[_HALF:])
               and np.array_equal(magnitudes, np.abs(values[_HALF:]), equal_nan=True)
               and bool(np.all(np.diff(magnitudes[:limit]) > 0)))
    return (magnitudes, limit) if ordered else None


# One thread (the loop vectorizes: 4e8 codes in 0.02 s); a parallel loop took longer and
# its compilation a second more in every fresh process.  A chunk at a time, stopping once
# the largest finite code is seen: blockwise quantization puts it in nearly every block.
@numba.njit(cache=True)
def _largest_finite_code(codes, limit):
    """The largest low seven bits below `limit` among uint8 codes (0 when none)."""
    best = 0
    for c0 in range(0, codes.shape[0], _CODE_CHUNK):
        chunk = codes[c0:c0 + _CODE_CHUNK]  # a view from 0: the loop vectorizes
        for i in range(chunk.shape[0]):
            m = chunk[i] & 0x7F
            best = max(best, m if m < limit else 0)
        if best == limit - 1:
            break
    return best


def _finite_magnitudes(v: Any) -> np.ndarray:
    """|v| in float64, flattened, its NaN and Inf left out: elements with a non-finite
    input have a non-finite exact value and are decided by `finite`, not by the bound."""
    a = np.abs(to_float64(np.asarray(v))).ravel()
    return a[np.isfinite(a)]
