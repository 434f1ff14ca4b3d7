"""Error metrics for comparing a kernel's output with a reference.

Conventions every function here follows:

* Inputs are array-likes of any float dtype (float64, float32, bfloat16, fp8); they are
  converted exactly to float64 before any arithmetic, and all arithmetic is float64.
* The two arrays must have the same shape: no broadcasting, because a broadcast between a
  kernel's output and its reference almost always hides a layout bug.  Mismatch -> ValueError.
* The reference (`ref`, `exact`, `naive`) must be finite: a non-finite reference is bad
  input and raises ValueError.  A NaN or Inf in the output under test never passes and never
  yields NaN: each metric returns its failing extreme (documented per function).
* Argument order follows the API: `(ref, out)` for the scalar norms, `(out, ref)` for
  `allclose_report` (like `np.allclose(a, b)`), `bound_ratio`, `bias_z` and `error_ratio`.

Example::

    >>> import numpy as np
    >>> ref = np.array([1.0, 2.0, 4.0]); out = np.float32(ref)
    >>> sqnr_db(ref, out), int(ulp_distance(out, np.nextafter(out, np.float32(9)), np.float32)[0])
    (inf, 1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numba
import numpy as np
from numpy.typing import ArrayLike

from fp8check.bits import F64_MAX
from fp8check.formats import Format, get_format, ulp_of
from fp8check.references.casts import rounded, to_float64
from fp8check.references.quant import BLOCK

BiasMode = Literal["magnitude", "signed"]
"""`bias_z`'s modes: the error toward or away from zero, or toward -inf or +inf."""
BIAS_MODES: tuple[BiasMode, ...] = ("magnitude", "signed")

ULP_NAN: int = int(np.iinfo(np.int64).max)
"""ULP distance reported where either operand is NaN: larger than any real distance."""

_ULP_SATURATE = np.uint64(ULP_NAN - 1)  # real distances are clamped below the NaN sentinel


def _as_f64(x: ArrayLike) -> np.ndarray:
    """x as a float64 array: x itself when it is one (the metrics never write to their
    inputs), else its exact float64 image."""
    a = np.asarray(x)
    return a if a.dtype == np.float64 else to_float64(a)


def _pair(
    ref: ArrayLike, out: ArrayLike, fn: str, out_name: str = "out"
) -> tuple[np.ndarray, np.ndarray]:
    """Both arrays as float64, same shape, with a finite reference."""
    r, o = _as_f64(ref), _as_f64(out)
    if r.shape != o.shape:
        raise ValueError(f"{fn}: shape mismatch ref {r.shape} vs {out_name} {o.shape}")
    if not np.all(np.isfinite(r)):
        raise ValueError(f"{fn}: ref contains NaN or Inf; a reference must be finite")
    return r, o


def _common_scale(*arrays: np.ndarray) -> float:
    """A power of two >= every |value|, so squares of the scaled arrays neither overflow
    nor lose relative precision (the ratios the metrics take are scale invariant)."""
    peak = max((max(float(a.max()), -float(a.min())) if a.size else 0.0) for a in arrays)
    return math.ldexp(1.0, math.frexp(peak)[1]) if peak > 0 else 1.0


# ----------------------------------------------------------------------------- ULP


def _exact_cast(x: ArrayLike, fmt: Format, name: str) -> np.ndarray:
    """`x` cast to `fmt`, raising ValueError unless every value is representable."""
    arr = np.asarray(x)
    if arr.dtype == fmt.dtype:
        return arr
    x64 = to_float64(arr)
    with np.errstate(over="ignore", invalid="ignore"):
        cast = rounded(x64, fmt.dtype)
    back = to_float64(cast)
    exact = (back == x64) | (np.isnan(back) & np.isnan(x64))
    if not np.all(exact):
        first = x64[~exact].flat[0]
        raise ValueError(
            f"ulp_distance: {name} has values not representable in {fmt.name} (e.g. {first!r})"
        )
    return cast


@numba.njit(parallel=True, cache=True)
def _ulp_bits(a, b, width, nan_min):
    """ulp_distance of flat bit patterns a, b (unsigned, `width` bits, sign on top):
    NaN where either magnitude is >= nan_min, else the magnitudes' difference on the same
    side of zero and their sum across it, saturated below ULP_NAN."""
    top = np.uint64(width - 1)
    mag = (np.uint64(1) << top) - np.uint64(1)
    out = np.empty(a.size, np.int64)
    for i in numba.prange(a.size):
        x, y = np.uint64(a[i]), np.uint64(b[i])
        mx, my = x & mag, y & mag
        if mx >= nan_min or my >= nan_min:
            out[i] = ULP_NAN
            continue
        if (x >> top) == (y >> top):
            d = mx - my if mx >= my else my - mx
        else:  # opposite signs: walk through zero
            d = mx + my
        out[i] = np.int64(min(d, _ULP_SATURATE))
    return out


def _nan_magnitude(fmt: Format) -> int:
    """The smallest magnitude bit pattern of a NaN in `fmt`: one past infinity's, or the
    pattern a cast of inf gives in a format without one (float8_e4m3fn: 0x7F)."""
    width = fmt.dtype.itemsize * 8
    bits = int(np.array(np.inf).astype(fmt.dtype).view(f"uint{width}")) & ((1 << width - 1) - 1)
    return bits + 1 if fmt.has_inf else bits


def ulp_distance(a: ArrayLike, b: ArrayLike, dtype) -> np.ndarray:
    """Number of representable `dtype` values between `a` and `b`, elementwise (int64).

    Both operands are cast exactly to `dtype` (float64, float32, bfloat16, float8_e4m3fn,
    float8_e5m2, or a format name); a value that is not representable raises ValueError.
    The distance is the difference of the ordered-integer images of the bit patterns (the
    sign-magnitude encoding mapped onto a monotone integer line), so +0 and -0 are equal,
    subnormals are one step apart each and a binade crossing costs exactly one step; inf
    and the largest finite value are 1 apart in formats with inf.  NaN in either operand
    gives `ULP_NAN`.  Distances too large for int64 (only possible in float64, across
    signs) saturate at ULP_NAN - 1.
    """
    fmt = get_format(dtype)
    ca, cb = _exact_cast(a, fmt, "a"), _exact_cast(b, fmt, "b")
    if ca.shape != cb.shape:
        raise ValueError(f"ulp_distance: shape mismatch a {ca.shape} vs b {cb.shape}")
    width = fmt.dtype.itemsize * 8
    bits = np.dtype(f"uint{width}")
    flat_a, flat_b = (np.ascontiguousarray(c).reshape(-1).view(bits) for c in (ca, cb))
    return _ulp_bits(flat_a, flat_b, width, np.uint64(_nan_magnitude(fmt))).reshape(ca.shape)


# ---------------------------------------------------------------- scalar norms


def sqnr_db(ref: ArrayLike, out: ArrayLike) -> float:
    """Signal-to-quantization-noise ratio 10 log10(sum ref^2 / sum (ref - out)^2) in dB.

    inf when out == ref everywhere (including empty arrays); -inf when ref is all zero but
    out is not, and -inf (failing) when out has a NaN or Inf.
    """
    r, o = _pair(ref, out, "sqnr_db")
    if not np.all(np.isfinite(o)):
        return -math.inf
    scale = _common_scale(r, o)
    return sqnr_db_of_sums(float(np.sum(np.square(r / scale))),
                           float(np.sum(np.square((r - o) / scale))))


def sqnr_db_of_sums(signal: float, noise: float) -> float:
    """`sqnr_db` from its two sums over a finite output, signal = sum ref^2 and noise =
    sum (ref - out)^2 (>= 0, in any one scale: the ratio is what counts): inf when noise
    is 0, -inf when signal is 0 and noise is not."""
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * (math.log10(signal) - math.log10(noise))


def calc_diff(x: ArrayLike, y: ArrayLike) -> float:
    """DeepGEMM's similarity error 1 - 2 sum(x y) / sum(x^2 + y^2), in [0, 2].

    0 when x == y (including both all-zero or empty).  Symmetric, so a NaN or Inf in either
    argument gives +inf (failing).
    """
    a, b = _as_f64(x), _as_f64(y)
    if a.shape != b.shape:
        raise ValueError(f"calc_diff: shape mismatch x {a.shape} vs y {b.shape}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return math.inf
    scale = _common_scale(a, b)
    a, b = a / scale, b / scale
    return calc_diff_of_sums(float(np.sum(a * b)), float(np.sum(a * a + b * b)))


def calc_diff_of_sums(cross: float, squares: float) -> float:
    """`calc_diff` from its two sums over finite x and y, cross = sum x y and squares =
    sum (x^2 + y^2) (in any one scale): 0 when squares is 0."""
    if squares == 0.0:
        return 0.0
    return 1.0 - 2.0 * cross / squares


def rel_fro(ref: ArrayLike, out: ArrayLike) -> float:
    """Relative Frobenius error ||out - ref||_F / ||ref||_F.

    0 when equal; inf when ref is all zero but out is not; inf when out has NaN or Inf.
    """
    r, o = _pair(ref, out, "rel_fro")
    if not np.all(np.isfinite(o)):
        return math.inf
    scale = _common_scale(r, o)
    noise = math.sqrt(float(np.sum(np.square((o - r) / scale))))
    if noise == 0.0:
        return 0.0
    signal = math.sqrt(float(np.sum(np.square(r / scale))))
    return noise / signal if signal > 0.0 else math.inf


def max_abs(ref: ArrayLike, out: ArrayLike) -> float:
    """max |out - ref| (0 for empty arrays); inf when out has NaN or Inf."""
    r, o = _pair(ref, out, "max_abs")
    if not np.all(np.isfinite(o)):
        return math.inf
    return float(np.max(np.abs(o - r))) if r.size else 0.0


def max_rel(ref: ArrayLike, out: ArrayLike) -> float:
    """max |out - ref| / |ref| over the elements with ref != 0.

    Where ref == 0 an element contributes 0 if out == 0 there and inf otherwise (any
    nonzero output for an exactly-zero reference is an unbounded relative error).  0 for
    empty arrays; inf when out has NaN or Inf.
    """
    r, o = _pair(ref, out, "max_rel")
    if not np.all(np.isfinite(o)):
        return math.inf
    if r.size == 0:
        return 0.0
    zero_ref = r == 0
    if np.any(zero_ref & (o != 0)):
        return math.inf
    safe = np.where(zero_ref, 1.0, r)
    return float(np.max(np.where(zero_ref, 0.0, np.abs(o - r) / np.abs(safe))))


# ------------------------------------------------------------------- allclose


@dataclass(frozen=True)
class AllcloseReport:
    """Outcome of |out - ref| <= atol + rtol |ref| elementwise (numpy's allclose rule).

    `worst_*` describe the element with the largest excess |out - ref| - (atol + rtol|ref|)
    (positive = failing); they are None for empty arrays.  NaN/Inf in out has excess inf.
    """

    n: int
    n_fail: int
    frac_fail: float
    worst_index: tuple[int, ...] | None
    worst_out: float | None
    worst_ref: float | None
    worst_excess: float | None
    passed: bool


def allclose_report(out: ArrayLike, ref: ArrayLike, atol: float, rtol: float) -> AllcloseReport:
    """Elementwise tolerance check with the worst offender; see `AllcloseReport`.

    atol and rtol must be finite and >= 0 (ValueError otherwise).  A NaN or Inf in out is
    a failure and, having infinite excess, is reported as the worst element.
    """
    for name, tol in (("atol", atol), ("rtol", rtol)):
        if not (math.isfinite(tol) and tol >= 0):
            raise ValueError(f"allclose_report: {name} must be finite and >= 0, got {tol!r}")
    r, o = _pair(ref, out, "allclose_report")
    with np.errstate(invalid="ignore"):
        excess = np.where(np.isfinite(o), np.abs(o - r) - (atol + rtol * np.abs(r)), np.inf)
    n = int(r.size)
    n_fail = int(np.count_nonzero(excess > 0))
    if n == 0:
        return AllcloseReport(0, 0, 0.0, None, None, None, None, True)
    idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(excess)), r.shape))
    return AllcloseReport(
        n=n,
        n_fail=n_fail,
        frac_fail=n_fail / n,
        worst_index=idx,
        worst_out=float(o[idx]),
        worst_ref=float(r[idx]),
        worst_excess=float(excess[idx]),
        passed=n_fail == 0,
    )


# ------------------------------------------------------------ a-priori bound


def bound_ratio(
    out: ArrayLike,
    exact: np.ndarray,
    abs_ab: np.ndarray,
    k: int,
    *,
    u: float = 2.0**-24,
    out_dtype=np.float32,
    n: int | None = None,
    extra: np.ndarray | None = None,
    underflow: float = 0.0,
) -> np.ndarray:
    """|out - exact| / bound, elementwise (float64); <= 1 for every valid implementation.

    bound = gamma_n * abs_ab + (1 + gamma_n) underflow + 0.5 * ulp(max(|exact|, |out|),
    out_dtype) + 2^-53 * |exact|, gamma_n = n u / (1 - n u), n = k + 2 ceil(k / 128) + 2
    unless given (`error_bound` returns it).

    Why this bounds every valid kernel: the kernel evaluates sum_i s_i a_i b_i (s_i the
    product of the two block scales) with float32 operations, in any order and with or
    without fma.  Each term passes through at most n roundings with relative error <= u
    (the k - 1 additions, the product, two per-block scale multiplications, and a spare
    two), so by Higham (Accuracy and Stability, Lemma 3.1 / eq. 3.4) the accumulator value
    acc satisfies |acc - x| <= gamma_n sum_i |s_i a_i b_i| <= gamma_n abs_ab, where x is
    the real value and abs_ab is an upper bound of (|A||B|)_ij on the dequantized operands.
    The relative-error model assumes no product falls below float32's smallest normal
    2^-126 (sums there are exact, products are not).  With underflow each multiplication
    may add an absolute e, |e| <= 2^-150 (or, in a kernel that flushes subnormals to zero,
    every operation up to 2^-126), amplified by the factors applied after it and by at
    most n roundings: `underflow` is W, the sum of those |e| times their amplification
    (`fp8check.measures.underflow` derives it per contract, with the proof), and the bound adds
    (1 + gamma_n) W.  W = 0 (the default) is the no-underflow model.  The final
    rounding out = RN(acc) to out_dtype adds <= 0.5 ulp(acc); RN is monotone, so |out|
    lies in the binade of |acc| or above and ulp(max(|exact|, |out|)) >= ulp(acc).
    `exact` is x rounded to float64, off by <= 2^-53 |exact|.  The denominator is never 0:
    the ulp term is at least half the smallest subnormal of out_dtype, so for
    exact == abs_ab == 0 the ratio is 0 when out == 0 and >= 1 otherwise.

    `exact` and `abs_ab` must be float64 (the references' outputs), finite, same shape as
    out, abs_ab >= 0.  NaN or Inf in out gives inf.  `u` is the accumulator's unit roundoff
    (2^-24 for float32); n u must be < 1.  `out_dtype` is the output's format: float32,
    bfloat16 or an fp8 format (ValueError for float64, see the code).

    `extra` (float64, >= 0, out's shape) is an absolute error the kernel's declared
    accumulator may add before the float32 work, e.g. the Hopper tensor core's truncation
    of each block partial (`references.hopper_bound.truncation_term`, with its proof).  It
    joins the bound, and the float32 roundings then act on values up to abs_ab + extra:
    bound = gamma_n (abs_ab + extra) + extra + the rest as above.
    """
    o, ex, ab, gamma, f = _bound_operands(out, exact, abs_ab, k, u, out_dtype, n, extra,
                                        "bound_ratio")
    floor = underflow_floor(underflow, gamma, "bound_ratio")
    return _ratio_all(o, ex, ab, gamma, f.min_exponent, f.mantissa_bits, floor).reshape(
        np.shape(exact))


def error_bound(
    out: ArrayLike,
    exact: np.ndarray,
    abs_ab: np.ndarray,
    k: int,
    *,
    u: float = 2.0**-24,
    out_dtype=np.float32,
    n: int | None = None,
    extra: np.ndarray | None = None,
    underflow: float = 0.0,
) -> np.ndarray:
    """The bound of `bound_ratio`, elementwise (float64, > 0, same arguments and checks):
    the error |out - exact| a valid kernel may make, in the output's units.

    Computed by the same scalar core as the ratio's denominator, so for a finite output
    |out - exact| > error_bound(...) exactly where bound_ratio(...) > 1 (the quotient of
    two floats e > b is at least 1 + 2^-52 after rounding).  Where `out` is NaN or Inf its
    magnitude is left out: the bound is what a finite output near `exact` would be allowed.
    """
    o, ex, ab, gamma, f = _bound_operands(out, exact, abs_ab, k, u, out_dtype, n, extra,
                                        "error_bound")
    floor = underflow_floor(underflow, gamma, "error_bound")
    return _bound_all(o, ex, ab, gamma, f.min_exponent, f.mantissa_bits, floor).reshape(
        np.shape(exact))


def gamma_n(k: int, u: float, n: int | None = None, fn: str = "gamma_n") -> float:
    """Higham's gamma_n = n u / (1 - n u), the bound's slope in |A||B|, for a K of `k`
    products: n = k + 2 ceil(k / BLOCK) + 2 rounded operations per output unless given (the
    k products' sum, each K block's two scale multiplications, the output's).  A one-line
    ValueError from `fn` for k or n not a positive integer, or u outside 0 < u, n u < 1."""
    if int(k) != k or k < 1:
        raise ValueError(f"{fn}: k must be a positive integer, got {k!r}")
    if n is None:
        n = int(k) + 2 * math.ceil(k / BLOCK) + 2
    if int(n) != n or n < 1:
        raise ValueError(f"{fn}: n must be a positive integer, got {n!r}")
    if not (0 < u and n * u < 1):
        raise ValueError(f"{fn}: need 0 < u and n*u < 1, got u={u!r}, n={n}")
    return n * u / (1 - n * u)


def _bound_operands(
    out: ArrayLike, exact: np.ndarray, abs_ab: np.ndarray, k: int, u: float, out_dtype,
    n: int | None, extra: np.ndarray | None, fn: str,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, Format]:
    """`bound_ratio`'s arguments checked (a one-line ValueError from `fn` naming the bad
    one) and flattened: (out, exact, abs_ab with `extra` folded in, gamma_n, the out
    format)."""
    o = _as_f64(out)
    ex, ab = np.asarray(exact), np.asarray(abs_ab)
    for name, arr in (("exact", ex), ("abs_ab", ab)):
        if arr.dtype != np.float64:
            raise ValueError(f"{fn}: {name} must be float64, got {arr.dtype}")
        if arr.shape != o.shape:
            raise ValueError(f"{fn}: shape mismatch {name} {arr.shape} vs out {o.shape}")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{fn}: {name} contains NaN or Inf")
    if np.any(ab < 0):
        raise ValueError(f"{fn}: abs_ab must be >= 0")
    gamma = gamma_n(k, u, n, fn)
    f = get_format(out_dtype)
    if f.name == "f64":
        # 0.5 ulp of float64's smallest subnormal is not a float64: the bound's rounding
        # term would round to 0, and exact == abs_ab == 0 would give 0/0.
        raise ValueError(f"{fn}: out_dtype must be narrower than float64 (f32, bf16, fp8)")
    if extra is not None:
        extra = np.asarray(extra)
        if extra.dtype != np.float64 or extra.shape != o.shape or not (
                np.all(np.isfinite(extra)) and np.all(extra >= 0)):
            raise ValueError(f"{fn}: extra must be finite float64 >= 0 of out's shape")
        # gamma * ab' = gamma (ab + extra) + extra, to float64 rounding (the bound's own
        # 2^-53 |exact| slack is far larger than the 2^-52 relative error of forming ab').
        ab = ab + extra + extra / gamma
    o_flat, ex_flat, ab_flat = (np.ascontiguousarray(v).ravel() for v in (o, ex, ab))
    return o_flat, ex_flat, ab_flat, gamma, f


def underflow_floor(underflow: float, gamma: float, fn: str) -> float:
    """(1 + gamma) W: the bound's absolute underflow term for `underflow` = W (finite,
    >= 0; ValueError from `fn` otherwise).  Rounded up by one float64 ulp so that the
    float64 product never falls below the real one."""
    if not (math.isfinite(underflow) and underflow >= 0):
        raise ValueError(f"{fn}: underflow must be finite and >= 0, got {underflow!r}")
    return math.nextafter((1.0 + gamma) * underflow, math.inf) if underflow else 0.0


@numba.njit(cache=True, inline="always")
def bound_of(o, ex, ab, gamma, emin, mant, floor):
    """`error_bound` of one element (the numba scalar core of the bound, shared by
    `ratio_of`): float64 o, ex, ab; the out format's `emin` and `mant`; `floor` the
    absolute underflow term (`underflow_floor`).  A non-finite o is left out of the ulp
    term's magnitude."""
    mag = abs(ex)
    if abs(o) <= F64_MAX and abs(o) > mag:
        mag = abs(o)
    return gamma * ab + floor + 0.5 * ulp_of(mag, emin, mant) + 2.0**-53 * abs(ex)


@numba.njit(cache=True, inline="always")
def ratio_of(o, ex, ab, gamma, emin, mant, floor):
    """`bound_ratio` of one element (a numba scalar core, inlined by the metric kernels):
    float64 o, ex, ab; the out format's `emin` and `mant`; `floor` as in `bound_of`; inf
    for a non-finite o."""
    if not abs(o) <= F64_MAX:
        return math.inf
    return abs(o - ex) / bound_of(o, ex, ab, gamma, emin, mant, floor)


@numba.njit(parallel=True, cache=True, error_model="numpy")  # the denominator is > 0
def _ratio_all(o, ex, ab, gamma, emin, mant, floor):
    out = np.empty(o.size)
    for i in numba.prange(o.size):
        out[i] = ratio_of(o[i], ex[i], ab[i], gamma, emin, mant, floor)
    return out


@numba.njit(parallel=True, cache=True)
def _bound_all(o, ex, ab, gamma, emin, mant, floor):
    out = np.empty(o.size)
    for i in numba.prange(o.size):
        out[i] = bound_of(o[i], ex[i], ab[i], gamma, emin, mant, floor)
    return out


# ---------------------------------------------------------- bias and ratios


@numba.njit(cache=True, inline="always")
def sign_z(r, o, magnitude):
    """bias_z's z of one element in unit "sign", as an int32: d sign(o - r), d = sign(p),
    p = r (o where r is 0) with `magnitude`, else 1; 0 where o or r is NaN.  Integer
    sums of it vectorize (the fused metrics pass of `fp8check.measures.totals`)."""
    p = r if r != 0 else o
    # signs as differences of comparisons: branch-free (random signs mispredict branches)
    s = np.int32(o > r) - np.int32(o < r)
    return (np.int32(p > 0) - np.int32(p < 0)) * s if magnitude else s


@numba.njit(cache=True, inline="always")
def z_of(r, o, magnitude, signs):
    """bias_z's normalised error of one element: z = d (o - r) / 2^floor(log2 |p|), p = r
    (o where r is 0; unit 1 where both are), or z = d sign(o - r) with `signs`
    (`sign_z`); d = sign(p) with `magnitude`, else 1."""
    if signs:  # no unit: its frexp would cost the sign test's loop most of its time
        return np.float64(sign_z(r, o, magnitude))
    p = r if r != 0 else o
    d = (np.float64(p > 0) - np.float64(p < 0)) if magnitude else 1.0
    return d * ((o - r) / (math.ldexp(1.0, math.frexp(abs(p))[1] - 1) if p != 0 else 1.0))


@numba.njit(cache=True)
def _cluster_sums(r, o, labels, lo, size, magnitude, signs):
    """bias_z's normalised errors z (`z_of`) summed per cluster, in element order: (sums
    [size], counts [size], whether any z is nonzero) for flat float64 r, o and labels in
    lo .. lo + size - 1."""
    sums = np.zeros(size)
    counts = np.zeros(size, np.int64)
    nonzero = False
    for i in range(r.size):
        z = z_of(r[i], o[i], magnitude, signs)
        nonzero |= z != 0
        sums[labels[i] - lo] += z
        counts[labels[i] - lo] += 1
    return sums, counts, nonzero


@numba.njit(parallel=True, cache=True)
def _crossed_sums(r, o, keep, groups, n_groups, block, magnitude, threads):
    """The sign test's z (`z_of`, unit "sign") of the kept elements of float64 r, o [rows, N]
    summed per row and per (group of the row, `block`-column tile): (row sums [rows], row
    counts, tile sums [n_groups * tiles], tile counts, sum of z^2).  A row range per
    thread (`threads`), each with its own tile sums (no more: they are zeroed and added per call):
    every sum is of z in {-1, 0, 1}, an exact integer in float64, so the order does not
    change a bit."""
    rows, n = r.shape
    tiles = (n + block - 1) // block
    parts = max(1, min(rows, threads))
    row_sums = np.zeros(rows)
    row_counts = np.zeros(rows, np.int64)
    col_sums = np.zeros((parts, n_groups * tiles))
    col_counts = np.zeros((parts, n_groups * tiles), np.int64)
    sq = np.zeros(parts)
    for p in numba.prange(parts):
        for i in range(p * rows // parts, (p + 1) * rows // parts):
            base = groups[i] * tiles
            for t in range(tiles):  # a tile at a time: no division per element
                zs, zq, cnt = 0.0, 0.0, 0
                for j in range(t * block, min(n, (t + 1) * block)):
                    # z of every element times keep (a sign: finite even where r, o are
                    # not), not a branch per element
                    z = z_of(r[i, j], o[i, j], magnitude, True) * keep[i, j]
                    zs += z
                    zq += z * z
                    cnt += keep[i, j]
                row_sums[i] += zs
                row_counts[i] += cnt
                col_sums[p, base + t] += zs
                col_counts[p, base + t] += cnt
                sq[p] += zq
    return row_sums, row_counts, col_sums.sum(axis=0), col_counts.sum(axis=0), sq.sum()


def bias_z(
    out: ArrayLike, ref: ArrayLike, *, mode: BiasMode = "magnitude",
    clusters: ArrayLike | None = None, unit: Literal["binade", "sign"] = "binade",
) -> float:
    """t-statistic of the normalised error, t = mean(z) / (std(z, ddof=1) / sqrt(N)),
    returned as the normal z of equal tail probability (see the end of the function).

    `clusters` (integer labels, the shape of `out`) makes it cluster-robust: the statistic
    is taken over the per-cluster means of z, N being the number of clusters.  Elements
    that share a rounding are not independent samples: every output of one (row, N tile)
    of a blockwise GEMM carries the same rounding error of RN(sa*sb) per K block, so with
    few K blocks their errors lean one way together and a per-element t-statistic is
    inflated by sqrt(elements per cluster) (a bit-exact deepgemm-recipe kernel reached
    |z| = 8.9 at M = 1, K = N = 128).  Truncation is one-signed in every cluster, so
    clustering costs it no power.  Needs at least 2 clusters (ValueError).

    z_i = d_i (out_i - ref_i) / 2^floor(log2 |ref_i|): each error is measured in units of
    its reference's binade (the ulp of ref up to a constant factor that is the same in every
    format), so large elements do not dominate and, unlike dividing by |ref_i|, the unit is
    constant across a rounding interval (no artificial bias from 1/|ref| weighting).  Where
    ref_i == 0 the binade of |out_i| is used (z_i = 0 when out_i is 0 too).
    d_i is sign(ref_i) (sign(out_i) where ref is 0) in mode "magnitude": z < 0 means the
    output is systematically smaller in magnitude (round-toward-zero, truncation), z > 0
    larger; this works on mixed-sign data, where truncation's signed errors cancel.  In
    mode "signed" d_i = 1 (round-down / round-up toward an infinity).
    Unbiased rounding gives |z| of order 1; |z| > ~5 is a systematic bias.  Elements
    whose reference is tiny through cancellation get large weights; an outlier pulls the
    statistic towards +-1, so this costs detection power, never a false alarm.

    `unit` "sign" replaces each error by its sign, z_i = d_i sign(out_i - ref_i) (a sign
    test, cluster-robust): no outlier can dominate, since every z_i is -1, 0 or 1, and
    it tests what a rounding mode decides, on which side of the reference the output
    lands, whatever the size of the error.  Round-to-nearest lands on either side
    alike (E z_i = 0); a directed rounding lands on one side wherever it rounds.  A
    cancellation element that dominated the "binade" statistic of a kernel rounding its
    scales up (|t| 3.5 where 94% of the clusters leaned up) weighs one sample here
    (|t| 43).  This is what the gate uses (`layers.op.criteria`).

    0 when every error is 0; +-inf when every z_i is the same nonzero value; +inf when out
    has NaN or Inf.  Needs at least 2 elements (ValueError).
    """
    if mode not in ("magnitude", "signed"):
        raise ValueError(f"bias_z: mode must be 'magnitude' or 'signed', got {mode!r}")
    if unit not in ("binade", "sign"):
        raise ValueError(f"bias_z: unit must be 'binade' or 'sign', got {unit!r}")
    r, o = _pair(ref, out, "bias_z")
    if r.size < 2:
        raise ValueError(f"bias_z: needs at least 2 elements, got {r.size}")
    if not np.all(np.isfinite(o)):
        return math.inf
    if clusters is None:  # every element its own cluster
        labels, lo, size = np.arange(r.size), 0, r.size
    else:
        labels = np.asarray(clusters).reshape(-1)
        if labels.size != r.size or not np.issubdtype(labels.dtype, np.integer):
            raise ValueError("bias_z: clusters must be integer labels of out's shape")
        lo = int(labels.min())
        size = int(labels.max()) - lo + 1
        if size > 2 * labels.size:  # sparse labels: ranks instead (dense ones need no sort)
            labels, lo = np.unique(labels, return_inverse=True)[1].reshape(-1), 0
            size = int(labels.max()) + 1
    sums, counts = _cluster_sums(r.reshape(-1), o.reshape(-1),
                                 labels.astype(np.int64, copy=False), lo, size,
                                 mode == "magnitude", unit == "sign")[:2]
    if clusters is not None and np.count_nonzero(counts) < 2:
        raise ValueError(f"bias_z: needs at least 2 clusters, got {np.count_nonzero(counts)}")
    return bias_z_of_clusters(sums, counts)


def bias_z_of_clusters(sums: np.ndarray, counts: np.ndarray) -> float:
    """`bias_z` from per-cluster sums of z and element counts (empty clusters, count 0,
    are left out): the t-statistic of the cluster means on the normal scale.  0 when
    every sum is 0 (no error, or errors that cancel within each cluster), +-inf when every
    cluster mean is the same nonzero value; ValueError with fewer than 2 clusters."""
    used = counts > 0
    if np.count_nonzero(used) < 2:
        raise ValueError(f"bias_z: needs at least 2 clusters, got {np.count_nonzero(used)}")
    if not np.any(sums[used]):
        return 0.0
    z = sums[used] / counts[used]
    mean = float(np.mean(z))
    sd = float(np.std(z, ddof=1))
    if sd == 0.0:
        return math.copysign(math.inf, mean)
    return _normal_scale(mean / (sd / math.sqrt(z.size)), z.size - 1)


def _normal_scale(t: float, dof: int) -> float:
    """t reported on the normal scale: the z with the same tail probability as t under
    Student's t with `dof` degrees of freedom, so one threshold means one false-alarm rate
    whether there are 3 clusters or 10^5 (t with 2 dof exceeds 6 by chance 2.7% of the
    time; the normal, 2e-9).  Through log tails; where even the log tail underflows (|t|
    in the hundreds with many dof) t is already normal and far out."""
    from scipy import special, stats

    log_tail = float(stats.t.logsf(abs(t), dof))
    if not math.isfinite(log_tail):
        return t
    return math.copysign(-float(special.ndtri_exp(log_tail)), t)


@dataclass(frozen=True)
class BiasSums:
    """What the gate's sign test (`bias_z_crossed`) needs of an output, summed: per row
    and per (group, column tile) the sums of z and the element counts, and the sum of
    z^2.  The elements of one row share the lhs's roundings, and the rows of one group in
    one column tile the rhs's (one column, or the N width of the rhs's scale blocks), so
    both are clusters.  Row chunks combine in `BiasChunks` (rows concatenate, tiles add)."""

    row_sums: np.ndarray
    row_counts: np.ndarray
    col_sums: np.ndarray
    col_counts: np.ndarray
    sq: float

    @classmethod
    def empty(cls, n_groups: int, n: int, block: int) -> BiasSums:
        """The sums of no rows, for `n_groups` groups of `n` columns in tiles of `block`."""
        size = n_groups * -(-n // block)
        return cls(np.zeros(0), np.zeros(0, np.int64), np.zeros(size),
                   np.zeros(size, np.int64), 0.0)


class BiasChunks:
    """The `BiasSums` of an output's row chunks, added in row order (`add`), for `n_groups`
    groups of `n` columns in tiles of `block`: the chunks' row sums kept to be
    concatenated once (concatenating chunk by chunk would copy the rows so far each time:
    quadratic in the chunks), their (group, tile) sums added in place."""

    def __init__(self, n_groups: int, n: int, block: int):
        empty = BiasSums.empty(n_groups, n, block)
        self._rows, self._row_counts = [empty.row_sums], [empty.row_counts]
        self._col_sums, self._col_counts, self._sq = empty.col_sums, empty.col_counts, 0.0

    def add(self, row_sums: np.ndarray, row_counts: np.ndarray, col_sums: ArrayLike,
            col_counts: ArrayLike, sq: float, at: slice = slice(None)) -> None:
        """The next rows' sums (`BiasSums`' fields), their (group, tile) sums `col_sums`
        and `col_counts` those of the tiles `at` (default: all)."""
        self._rows.append(row_sums)
        self._row_counts.append(row_counts)
        self._col_sums[at] += col_sums
        self._col_counts[at] += col_counts
        self._sq += sq

    def add_sums(self, part: BiasSums) -> None:
        """The next rows' `BiasSums` (of every tile)."""
        self.add(part.row_sums, part.row_counts, part.col_sums, part.col_counts, part.sq)

    def sums(self) -> BiasSums:
        """The `BiasSums` of the rows added."""
        return BiasSums(np.concatenate(self._rows), np.concatenate(self._row_counts),
                        self._col_sums.copy(), self._col_counts.copy(), self._sq)


def bias_sums(out: ArrayLike, ref: ArrayLike, row_groups: ArrayLike, n_groups: int, *,
              mode: BiasMode, block: int = 1, keep: ArrayLike | None = None) -> BiasSums:
    """The `BiasSums` of the sign test of finite `out` against `ref` (same shape, rows x
    N: any leading axes are rows), `row_groups` the group (0 .. n_groups - 1) of each row,
    column tiles of `block` columns (the rhs's scale blocks' N width, 1 for an unscaled
    rhs), over the elements `keep` marks (default: all): z = d sign(out - ref), d =
    sign(ref) (sign(out) where ref is 0) in mode "magnitude", 1 in mode "signed"
    (`bias_z`)."""
    if mode not in ("magnitude", "signed"):
        raise ValueError(f"bias_sums: mode must be 'magnitude' or 'signed', got {mode!r}")
    r, o = _pair(ref, out, "bias_sums")
    n = r.shape[-1] if r.ndim else 1
    r2, o2 = r.reshape(-1, n), o.reshape(-1, n)
    groups = np.asarray(row_groups, np.int64).reshape(-1)
    if groups.size != r2.shape[0] or (groups.size and not 0 <= groups.min() <= groups.max()
                                      < n_groups):
        raise ValueError(f"bias_sums: row_groups must give each of the {r2.shape[0]} rows a "
                         f"group 0 .. {n_groups - 1}")
    kept = (np.ones(r2.shape, np.bool_) if keep is None
            else np.asarray(keep, np.bool_).reshape(r2.shape))
    if block < 1:
        raise ValueError(f"bias_sums: block must be >= 1, got {block}")
    return BiasSums(*_crossed_sums(r2, o2, kept, groups, n_groups, block, mode == "magnitude",
                                   numba.get_num_threads()))


def bias_z_crossed(sums: BiasSums) -> float:
    """The gate's bias statistic: the t of the mean sign z with a two-way cluster-robust
    variance (Cameron, Gelbach and Miller 2011), rows and (group, column tile) as crossed
    clusters (`BiasSums`), on the normal scale as `bias_z_of_clusters`.

    Why two ways: a kernel's roundings of its operands are shared.  Every output of a row
    shares that row's lhs roundings (its dequantized values, RN(sa*sb) of each K block),
    and the outputs of one group in one column (an unscaled rhs) or one 128-column tile
    (an FP8 rhs with 128x128 scale blocks) share the rhs's: a kernel that dequantizes its
    weights rounds each block's products q * s once, and with one scale per block those
    errors are a function of the FP8 codes, alike over the block's columns.  Either
    makes the signs of many elements lean together, and a statistic that treats the
    other direction as independent is inflated (a correct dequantize-then-matmul kernel
    reached |z| 6.7 on a ci case clustered by (row, N tile) alone, 3.7 by rows and
    (group, column), 2.3 by rows and (group, 128-column tile)).  V = cA VA + cB VB - cE VE
    over rows (A), tiles (B) and elements (E), each V the sum of squared cluster
    deviations from the mean and c = G / (G - 1) for G clusters; where it falls below
    either one-way variance (the subtraction can), the larger one-way variance is used.
    Degrees of freedom: the fewer clusters minus one.  Directed rounding leans every row
    and tile the same way; with few tiles (a narrow N, few groups) the test has less
    power.  0 when every z is 0; +-inf when the variance is 0 with a nonzero mean;
    ValueError with fewer than 2 clusters either way."""
    used_a, used_b = sums.row_counts > 0, sums.col_counts > 0
    ga, gb = int(np.count_nonzero(used_a)), int(np.count_nonzero(used_b))
    if min(ga, gb) < 2:
        raise ValueError(f"bias_z: needs at least 2 rows and 2 (group, column tile) clusters, "
                         f"got {ga} and {gb}")
    n = int(sums.row_counts.sum())
    total = float(sums.row_sums.sum())
    if sums.sq == 0.0:
        return 0.0
    mean = total / n

    def spread(s: np.ndarray, c: np.ndarray) -> float:
        return float(np.sum((s - c * mean) ** 2))

    va = ga / (ga - 1) * spread(sums.row_sums[used_a], sums.row_counts[used_a])
    vb = gb / (gb - 1) * spread(sums.col_sums[used_b], sums.col_counts[used_b])
    ve = n / (n - 1) * max(sums.sq - n * mean * mean, 0.0)
    var = max(va + vb - ve, va, vb) / (n * n)
    if var <= 0.0:
        return math.copysign(math.inf, mean) if mean else 0.0
    return _normal_scale(mean / math.sqrt(var), min(ga, gb) - 1)


def row_groups(out_shape: tuple[int, ...], group_sizes: ArrayLike) -> tuple[np.ndarray, int]:
    """The group of each compared row of a grouped-matmul output, and the number of groups:
    [rows, N] outputs (gmm, dgrad) by `group_sizes` (row r of group g for offsets[g] <= r <
    offsets[g + 1]; the rows compared are the first sum(group_sizes)), [G, K, N] outputs
    (tgmm) by their leading index (each of the K rows of expert g is in group g)."""
    gs = np.asarray(group_sizes, np.int64).reshape(-1)
    if len(out_shape) == 3:
        return np.repeat(np.arange(out_shape[0]), out_shape[1]), out_shape[0]
    return np.repeat(np.arange(gs.size), gs), gs.size


def error_ratio(out: ArrayLike, ref: ArrayLike, naive: ArrayLike) -> float:
    """FlashAttention-style error ratio: rms(out - ref) / rms(naive - ref).

    `naive` is a straightforward implementation in the same precision as the kernel; a
    ratio <= ~2 says the kernel is no less accurate than the obvious way.  The root mean
    square is used rather than FlashAttention's max: with float32 outputs both errors are
    a few ulps and their maxima are single-element extremes, so a max ratio of two valid
    summation orders swings past 2 by chance, while the rms over many elements is stable.
    0/0 (both exact) is 1.0 (as accurate as naive); x/0 with x > 0 is inf.  NaN/Inf in
    out gives inf; naive must be finite (ValueError), since an infinite baseline error
    would let anything pass.
    """
    r, o = _pair(ref, out, "error_ratio")
    _, nv = _pair(ref, naive, "error_ratio", out_name="naive")
    if not np.all(np.isfinite(nv)):
        raise ValueError("error_ratio: naive contains NaN or Inf; the baseline must be finite")
    if not np.all(np.isfinite(o)):
        return math.inf
    d_out, d_naive = o - r, nv - r
    scale = _common_scale(d_out, d_naive)  # power of two: keeps the squares in range
    out_sq, naive_sq = (float(np.sum(np.square(np.divide(d, scale, out=d), out=d)))
                        for d in (d_out, d_naive))
    return error_ratio_of_sums(out_sq, naive_sq, r.size)


def error_ratio_of_sums(out_sq: float, naive_sq: float, n: int) -> float:
    """`error_ratio` of a finite output from its sums over n elements, out_sq = sum
    (out - ref)^2 and naive_sq = sum (naive - ref)^2 (in any one scale): 1.0 for n == 0
    or when both are 0, inf when only naive_sq is."""
    if n == 0:
        return 1.0
    err_out, err_naive = math.sqrt(out_sq / n), math.sqrt(naive_sq / n)
    if err_naive == 0.0:
        return 1.0 if err_out == 0.0 else math.inf
    return err_out / err_naive
