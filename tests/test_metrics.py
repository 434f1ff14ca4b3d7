"""fp8check.measures.metrics against independently computed answers.

Known answers come from the definitions, not from the code: ULP distances from np.nextafter
walks and from ranking every code of a format by value; norms from hand-built cases;
bound_ratio's exact values from math.fsum / fractions.Fraction, with the kernel side
simulated by explicit float32 summations in many orders.
"""

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from fp8check.formats import get_format
from fp8check.measures.metrics import (
    ULP_NAN,
    allclose_report,
    bias_z,
    bound_ratio,
    calc_diff,
    error_bound,
    error_ratio,
    max_abs,
    max_rel,
    rel_fro,
    sqnr_db,
    ulp_distance,
)

F32 = np.float32
BF16 = ml_dtypes.bfloat16
E4M3 = ml_dtypes.float8_e4m3fn
E5M2 = ml_dtypes.float8_e5m2

# ------------------------------------------------------------------------ ULP


def _walk(start, steps: int, dtype) -> np.ndarray:
    """start, nextafter(start, +inf), ... : `steps` + 1 consecutive values of dtype."""
    out = [dtype(start)]
    with np.errstate(over="ignore"):  # the "to-infinity" walk steps from max to inf
        for _ in range(steps):
            out.append(np.nextafter(out[-1], dtype(np.inf)))
    return np.array(out, dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "where",
    ["binade", "normal-subnormal", "zero-crossing", "to-infinity"],
)
def test_ulp_distance_matches_nextafter_walk(dtype, where):
    info = np.finfo(dtype)
    start = {
        "binade": dtype(1.0),
        "normal-subnormal": info.smallest_normal,
        "zero-crossing": -info.smallest_subnormal * 5,
        "to-infinity": info.max,
    }[where]
    if where in ("binade", "normal-subnormal"):  # start 12 values below the boundary
        for _ in range(12):
            start = np.nextafter(dtype(start), dtype(-np.inf))
    steps = 1 if where == "to-infinity" else 24
    walk = _walk(start, steps, dtype)
    # Across zero the walk goes -min_sub, -0, +min_sub (nextafter never stops at +0), so
    # walk index == position on the ordered line with -0 and +0 as one point.
    i, j = np.meshgrid(np.arange(walk.size), np.arange(walk.size), indexing="ij")
    d = ulp_distance(walk[i], walk[j], dtype)
    assert d.dtype == np.int64
    np.testing.assert_array_equal(d, np.abs(i - j))


@pytest.mark.parametrize("dtype", [E4M3, E5M2, BF16], ids=["e4m3fn", "e5m2", "bf16"])
def test_ulp_distance_equals_rank_difference_over_every_code(dtype):
    """Rank every non-NaN code by value (+0 and -0 share a rank): the ULP distance of two
    codes is the difference of their ranks.  For the fp8 formats all 256 x 256 pairs, for
    bf16 every code against 40 random anchors."""
    width = np.dtype(dtype).itemsize * 8
    codes = np.arange(2**width, dtype=np.uint64).astype(f"uint{width}").view(dtype)
    with np.errstate(invalid="ignore"):  # NaN codes
        values = codes.astype(np.float64)
    codes, values = codes[~np.isnan(values)], values[~np.isnan(values)]
    ranks = np.unique(values, return_inverse=True)[1]
    if width == 8:
        a_idx, b_idx = np.meshgrid(np.arange(codes.size), np.arange(codes.size), indexing="ij")
    else:
        anchors = np.random.default_rng(0).choice(codes.size, 40, replace=False)
        a_idx, b_idx = np.meshgrid(anchors, np.arange(codes.size), indexing="ij")
    d = ulp_distance(codes[a_idx], codes[b_idx], dtype)
    np.testing.assert_array_equal(d, np.abs(ranks[a_idx] - ranks[b_idx]))


def test_ulp_distance_signed_zeros_and_infinity():
    assert ulp_distance(np.float32(-0.0), np.float32(0.0), np.float32) == 0
    big = ml_dtypes.finfo(E5M2).max
    assert ulp_distance(np.array([np.inf]), np.array([big]), E5M2)[0] == 1
    assert ulp_distance(np.array([np.inf]), np.array([ml_dtypes.finfo(BF16).max]), BF16)[0] == 1


def test_ulp_distance_float64_extremes_saturate_below_sentinel():
    # -inf to +inf is twice the magnitude of inf's bit pattern, more than int64 holds.
    d = ulp_distance(np.array([-np.inf]), np.array([np.inf]), np.float64)[0]
    assert 2 * 0x7FF0000000000000 > ULP_NAN and d == ULP_NAN - 1


@pytest.mark.parametrize("dtype", [np.float32, BF16, E4M3, E5M2, np.float64])
def test_ulp_distance_nan_gives_sentinel(dtype):
    nan = np.array([np.nan, 1.0, np.nan]).astype(dtype)
    one = np.array([1.0, np.nan, np.nan]).astype(dtype)
    np.testing.assert_array_equal(ulp_distance(nan, one, dtype), [ULP_NAN] * 3)


def test_ulp_distance_e4m3_both_nan_codes():
    nans = np.array([0x7F, 0xFF], dtype=np.uint8).view(E4M3)
    assert np.all(ulp_distance(nans, np.zeros(2, dtype=E4M3), E4M3) == ULP_NAN)


@pytest.mark.parametrize(
    "value, dtype",
    [(0.1, np.float32), (1.0 + 2.0**-10, BF16), (500.0, E4M3), (np.inf, E4M3), (1e300, np.float32)],
)
def test_ulp_distance_rejects_unrepresentable_values(value, dtype):
    with pytest.raises(ValueError, match="not representable"):
        ulp_distance(np.array([value]), np.array([0.0]), dtype)


def test_ulp_distance_shape_mismatch():
    with pytest.raises(ValueError, match="shape"):
        ulp_distance(np.zeros(3, np.float32), np.zeros(4, np.float32), np.float32)


# ----------------------------------------------------------------- scalar norms


def test_sqnr_hand_built():
    ref, out = np.array([3.0, 4.0]), np.array([3.0, 5.0])  # signal 25, noise 1
    assert sqnr_db(ref, out) == pytest.approx(10 * math.log10(25.0), rel=1e-15)
    # the float64 sums of squares would overflow at this scale without rescaling
    assert sqnr_db(ref * 1e200, out * 1e200) == pytest.approx(10 * math.log10(25.0), rel=1e-12)


def test_sqnr_edge_cases():
    x = np.array([1.0, -2.0])
    assert sqnr_db(x, x.astype(np.float32)) == math.inf
    assert sqnr_db(np.empty(0), np.empty(0)) == math.inf
    assert sqnr_db(np.zeros(2), np.array([0.0, 1e-30])) == -math.inf
    assert sqnr_db(x, np.array([1.0, np.nan])) == -math.inf
    assert sqnr_db(x, np.array([1.0, np.inf])) == -math.inf
    with pytest.raises(ValueError, match="NaN or Inf"):
        sqnr_db(np.array([np.nan, 1.0]), x)
    with pytest.raises(ValueError, match="shape"):
        sqnr_db(x, x[:1])


def test_calc_diff_known_answers():
    # 1 - 2*sum(xy)/sum(x^2+y^2) with exact rational arithmetic for the expected value
    x, y = [1, 2], [2, 4]
    expected = 1 - Fraction(2 * 10, 5 + 20)
    assert calc_diff(np.array(x, float), np.array(y, float)) == pytest.approx(float(expected))
    assert calc_diff(np.array([1.0, 0.0]), np.array([0.0, 1.0])) == 1.0
    assert calc_diff(np.array([1.0, -3.0]), np.array([-1.0, 3.0])) == 2.0
    assert calc_diff(np.array([1.5, -3.0]), np.array([1.5, -3.0])) == 0.0
    assert calc_diff(np.zeros(3), np.zeros(3)) == 0.0
    assert calc_diff(np.array([1.0, np.nan]), np.ones(2)) == math.inf
    assert calc_diff(np.ones(2), np.array([np.inf, 1.0])) == math.inf


def test_rel_fro_max_abs_max_rel_known_answers():
    ref, out = np.array([3.0, 4.0]), np.array([3.0, 5.0])
    assert rel_fro(ref, out) == pytest.approx(1 / 5, rel=1e-15)
    assert max_abs(ref, out) == 1.0
    assert max_rel(np.array([2.0, -4.0, 0.0]), np.array([2.5, -4.0, 0.0])) == 0.25
    assert max_rel(np.array([2.0, 0.0]), np.array([2.0, 1e-30])) == math.inf
    assert rel_fro(np.zeros(2), np.array([0.0, 1.0])) == math.inf
    assert rel_fro(ref, ref) == 0.0 and max_abs(ref, ref) == 0.0 and max_rel(ref, ref) == 0.0
    for metric in (rel_fro, max_abs, max_rel):
        assert metric(ref, np.array([3.0, np.nan])) == math.inf
        assert metric(ref, np.array([-np.inf, 4.0])) == math.inf


# ------------------------------------------------------------------- allclose


def test_allclose_report_worst_element_and_counts():
    ref = np.ones((3, 4))
    out = ref.copy()
    out[0, 1] += 0.25  # tolerance is 0.1 + 0.1 * 1 = 0.2: fails by 0.05
    out[2, 2] -= 0.5  # fails by 0.3: the worst
    out[1, 3] += 0.125  # passes
    rep = allclose_report(out, ref, atol=0.1, rtol=0.1)
    assert (rep.n, rep.n_fail, rep.frac_fail, rep.passed) == (12, 2, 2 / 12, False)
    assert rep.worst_index == (2, 2) and rep.worst_out == 0.5 and rep.worst_ref == 1.0
    assert rep.worst_excess == pytest.approx(0.3, rel=1e-12)


def test_allclose_report_boundary_is_inclusive():
    ref = np.array([1.0])
    assert allclose_report(np.array([1.25]), ref, atol=0.25, rtol=0.0).passed
    assert not allclose_report(np.array([1.25 + 2.0**-50]), ref, atol=0.25, rtol=0.0).passed


def test_allclose_report_nan_is_worst_failure():
    ref = np.zeros((2, 2))
    out = np.array([[5.0, 0.0], [0.0, np.nan]])
    rep = allclose_report(out, ref, atol=1e-3, rtol=1e-3)
    assert rep.n_fail == 2 and rep.worst_index == (1, 1) and rep.worst_excess == math.inf
    assert math.isnan(rep.worst_out)


def test_allclose_report_empty_and_bad_tolerances():
    rep = allclose_report(np.empty((0, 4)), np.empty((0, 4)), atol=0.0, rtol=0.0)
    assert rep.passed and rep.n == 0 and rep.worst_index is None
    for atol, rtol in ((-1.0, 0.0), (0.0, math.nan)):
        with pytest.raises(ValueError, match="must be finite"):
            allclose_report(np.ones(1), np.ones(1), atol=atol, rtol=rtol)


# -------------------------------------------------------------- bound_ratio


def _round_bf16(x):
    return np.asarray(x, dtype=np.float32).astype(BF16).astype(np.float32)


def _serial(products: np.ndarray, order: np.ndarray, accumulate) -> np.ndarray:
    """Sum products[:, order] one term at a time with `accumulate(acc, term)`."""
    acc = np.zeros(products.shape[0], dtype=np.float32)
    for i in order:
        acc = accumulate(acc, products[:, i])
    return acc


def _add_f32(acc, t):
    """One float32 addition (both operands float32, result rounded RNE to float32)."""
    return (acc + t.astype(np.float32)).astype(np.float32)


def _pairwise_f32(t: np.ndarray) -> np.ndarray:
    while t.shape[1] > 1:
        half = t.shape[1] // 2
        head = (t[:, :half] + t[:, half : 2 * half]).astype(np.float32)
        t = np.concatenate([head, t[:, 2 * half :]], axis=1) if t.shape[1] % 2 else head
    return t[:, 0]


def _float32_dot_orders(a: np.ndarray, b: np.ndarray, rng) -> dict[str, np.ndarray]:
    """Row-wise dot products of float32 a, b [R, k] in many valid float32 orders."""
    k = a.shape[1]
    prod32 = (a * b).astype(np.float32)  # product rounded to float32 (no fma)
    prod64 = a.astype(np.float64) * b.astype(np.float64)  # exact (48-bit significands)

    def fma_via_f64(acc, t):  # a*b + acc in float64, then one rounding to float32
        return (acc.astype(np.float64) + t).astype(np.float32)

    fwd = np.arange(k)
    sums = {
        "forward": _serial(prod32, fwd, _add_f32),
        "reverse": _serial(prod32, fwd[::-1], _add_f32),
        "forward-fma": _serial(prod64, fwd, fma_via_f64),
        "reverse-fma": _serial(prod64, fwd[::-1], fma_via_f64),
        "pairwise": _pairwise_f32(prod32),
    }
    for p in range(3):
        perm = rng.permutation(k)
        sums[f"perm{p}"] = _serial(prod32, perm, _add_f32)
        sums[f"perm{p}-fma"] = _serial(prod64, perm, fma_via_f64)
    # 128-wide blocks summed pairwise, then the block partials accumulated forward
    blocks = [_pairwise_f32(prod32[:, j : j + 128]) for j in range(0, k, 128)]
    sums["blocked"] = _serial(np.stack(blocks, axis=1), np.arange(len(blocks)), _add_f32)
    return sums


@pytest.mark.parametrize("k, seed", [(96, 0), (256, 1), (512, 2)])
def test_bound_ratio_holds_for_every_float32_order_and_fails_bf16_accumulation(k, seed):
    rng = np.random.default_rng(seed)
    rows = 64
    a = rng.standard_normal((rows, k)).astype(np.float32)
    b = rng.standard_normal((rows, k)).astype(np.float32)
    prod64 = a.astype(np.float64) * b.astype(np.float64)  # exact
    exact = np.array([math.fsum(r) for r in prod64])  # correctly rounded to float64
    abs_ab = np.nextafter(np.array([math.fsum(r) for r in np.abs(prod64)]), np.inf)
    for name, out in _float32_dot_orders(a, b, rng).items():
        ratio = bound_ratio(out, exact, abs_ab, k)
        assert np.all(ratio <= 1.0), f"{name}: max ratio {ratio.max()}"
    bf16_sum = _serial(prod64, np.arange(k), lambda acc, t: _round_bf16(acc + t))
    ratio = bound_ratio(bf16_sum, exact, abs_ab, k)
    assert np.mean(ratio > 1.0) > 0.9, f"bf16 accumulation passes: max ratio {ratio.max()}"


@pytest.mark.parametrize("k", [128, 512])
def test_bound_ratio_is_nearly_tight_for_worst_case_forward_sum(k):
    """1 + (k-1) terms just under half an ulp of 1: forward float32 summation drops every
    term, so the error is (k-1) t ~ (k-1) u |sum|, close to the a-priori bound gamma_n
    sum|a_i b_i|.  The ratio must stay <= 1 yet exceed 0.9 (the bound is not vacuous and
    n is not over-counted)."""
    t = np.float32(2.0**-24 * (1 - 2.0**-10))
    a = np.full((1, k), t, dtype=np.float32)
    a[0, 0] = 1.0
    b = np.ones((1, k), dtype=np.float32)
    prod64 = a.astype(np.float64) * b
    exact = np.array([math.fsum(prod64[0])])
    out = _serial((a * b).astype(np.float32), np.arange(k), _add_f32)
    assert out[0] == 1.0  # every small term was rounded away
    ratio = bound_ratio(out, exact, exact.copy(), k)[0]
    assert 0.9 < ratio <= 1.0


def test_bound_ratio_holds_for_blocked_fp8_with_per_block_scales():
    """DeepGEMM-style: exact-or-float32 128-wide partials of e4m3 products, then the block
    scales applied in float32, with or without fma, accumulated over K blocks."""
    rng = np.random.default_rng(3)
    rows, k = 64, 384
    nb = k // 128
    qa = rng.standard_normal((rows, k)).astype(np.float32).astype(E4M3).astype(np.float32)
    qb = (rng.standard_normal((rows, k)) * 50).astype(np.float32).astype(E4M3)
    qb = qb.astype(np.float32)
    sa = np.exp2(rng.uniform(-8, 2, (rows, nb))).astype(np.float32)
    sb = np.exp2(rng.uniform(-8, 2, (rows, nb))).astype(np.float32)
    prod = qa * qb  # exact: 4-bit significands
    p_exact = prod.reshape(rows, nb, 128).astype(np.float64).sum(-1)  # exact, < 2^17 terms
    p_f32_fwd = np.stack(
        [_serial(prod[:, j * 128 : (j + 1) * 128], np.arange(128), _add_f32) for j in range(nb)],
        axis=1,
    )
    exact, abs_ab = np.empty(rows), np.empty(rows)
    p_abs = np.abs(prod).reshape(rows, nb, 128).astype(np.float64).sum(-1)
    for r in range(rows):
        s = [Fraction(float(sa[r, j])) * Fraction(float(sb[r, j])) for j in range(nb)]
        exact[r] = float(sum(s[j] * Fraction(p_exact[r, j]) for j in range(nb)))
        abs_ab[r] = np.nextafter(float(sum(s[j] * Fraction(p_abs[r, j]) for j in range(nb))), 1e9)

    def deepgemm(p):  # acc = fma(RN(sa*sb), P, acc), fma emulated through float64
        acc = np.zeros(rows, np.float32)
        for j in range(nb):
            s = (sa[:, j] * sb[:, j]).astype(np.float32)
            acc = (s.astype(np.float64) * p[:, j].astype(np.float32) + acc).astype(np.float32)
        return acc

    def tokamax(p):  # acc = RN(RN(RN(P*sa)*sb) + acc)
        acc = np.zeros(rows, np.float32)
        for j in range(nb):
            t = ((p[:, j].astype(np.float32) * sa[:, j]).astype(np.float32) * sb[:, j])
            acc = (acc + t.astype(np.float32)).astype(np.float32)
        return acc

    for name, out in {
        "deepgemm-exact-P": deepgemm(p_exact),
        "deepgemm-f32-P": deepgemm(p_f32_fwd),
        "tokamax-exact-P": tokamax(p_exact),
        "tokamax-f32-P": tokamax(p_f32_fwd),
    }.items():
        ratio = bound_ratio(out, exact, abs_ab, k)
        assert np.all(ratio <= 1.0), f"{name}: max ratio {ratio.max()}"
    # a kernel whose scale multiply is done in bf16 is outside the contract
    bad = np.zeros(rows, np.float32)
    for j in range(nb):
        s = _round_bf16(sa[:, j] * sb[:, j])
        bad = (bad + (s * p_exact[:, j].astype(np.float32)).astype(np.float32)).astype(np.float32)
    assert np.any(bound_ratio(bad, exact, abs_ab, k) > 1.0)


def test_bound_ratio_final_rounding_term():
    """With abs_ab = 0 the bound is half an ulp of the output format (plus 2^-53 |exact|):
    the correctly rounded value passes, its neighbour fails, in the format asked for."""
    rng = np.random.default_rng(4)
    exact = rng.standard_normal(1000) * np.exp2(rng.integers(-30, 30, 1000))
    zero = np.zeros_like(exact)
    rn32 = exact.astype(np.float32)
    assert np.all(bound_ratio(rn32, exact, zero, 1) <= 1.0)
    assert np.all(bound_ratio(_away(rn32, exact), exact, zero, 1) > 1.0)
    # float32-representable exact values, so float64 -> float32 -> bf16 rounds only once
    exact32 = rn32.astype(np.float64)
    rnbf = rn32.astype(BF16)
    assert np.all(bound_ratio(rnbf, exact32, zero, 1, out_dtype=BF16) <= 1.0)
    assert np.mean(bound_ratio(rnbf, exact32, zero, 1, out_dtype=np.float32) > 1.0) > 0.9


def _away(rounded: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """The float32 neighbour of `rounded` on the far side from `exact` (a 1-ulp error
    plus the rounding error: always more than half an ulp)."""
    direction = np.where(rounded.astype(np.float64) >= exact, np.inf, -np.inf).astype(np.float32)
    return np.nextafter(rounded, direction)


def test_bound_ratio_zero_denominator_cases_and_nonfinite():
    z = np.zeros(3)
    out = np.array([0.0, np.finfo(np.float32).smallest_subnormal, np.nan], dtype=np.float32)
    ratio = bound_ratio(out, z, z, 128)
    assert ratio[0] == 0.0 and ratio[1] > 1.0 and ratio[2] == math.inf
    assert bound_ratio(np.array([np.inf], np.float32), np.ones(1), np.ones(1), 8)[0] == math.inf


def _ulp_by_frexp(x: float, emin: int, mant: int) -> float:
    """The spacing of a format at |x| from math.frexp (independent of formats.ulp)."""
    e = math.frexp(x)[1] - 1 if x else emin
    return math.ldexp(1.0, max(e, emin) - mant)


@pytest.mark.parametrize("out_dtype", [np.float32, BF16, ml_dtypes.float8_e4m3fn])
def test_bound_ratio_is_its_formula_element_by_element(out_dtype):
    # Adversarial values: zeros of both signs, subnormals of the format and of float64,
    # powers of two, values near the format's max, random magnitudes over many binades.
    fmt = get_format(out_dtype)
    rng = np.random.default_rng(7)
    special = [0.0, -0.0, fmt.smallest_subnormal, fmt.tiny, 2.0**-1074, 1.0, -2.0, fmt.max]
    ex = np.concatenate([special, rng.standard_normal(500) * np.exp2(rng.integers(-30, 30, 500))])
    ex = np.clip(ex, -fmt.max, fmt.max)
    out = np.clip(ex * (1 + rng.standard_normal(ex.size) * 2.0**-8), -fmt.max, fmt.max)
    out = out.astype(out_dtype)
    ab = np.abs(ex) * rng.uniform(1, 4, ex.size)
    k, u = 256, 2.0**-24
    n = k + 2 * math.ceil(k / 128) + 2
    gamma = n * u / (1 - n * u)
    expected, bounds = [], []
    for o, e, a in zip(out.astype(np.float64).tolist(), ex.tolist(), ab.tolist(), strict=True):
        ulp_m = _ulp_by_frexp(max(abs(e), abs(o)), fmt.min_exponent, fmt.mantissa_bits)
        bounds.append(gamma * a + 0.5 * ulp_m + 2.0**-53 * abs(e))
        expected.append(abs(o - e) / bounds[-1])
    np.testing.assert_array_equal(bound_ratio(out, ex, ab, k, out_dtype=out_dtype), expected)
    np.testing.assert_array_equal(error_bound(out, ex, ab, k, out_dtype=out_dtype), bounds)


@pytest.mark.parametrize("out_dtype", [np.float32, BF16])
def test_error_bound_is_exceeded_exactly_where_the_ratio_exceeds_1(out_dtype):
    """Adversarial: |A||B| chosen so that each error sits within a few float64 ulps of
    its bound, on both sides; `err > error_bound` and `bound_ratio > 1` agree on every
    element (what the report's bound marks rely on), with or without `extra`."""
    rng = np.random.default_rng(5)
    ex = rng.standard_normal(4000) * np.exp2(rng.integers(-20, 20, 4000))
    out = (ex * (1 + rng.standard_normal(ex.size) * 2.0**-6)).astype(out_dtype)
    err = np.abs(out.astype(np.float64) - ex)
    k = 512
    extra = rng.uniform(0, 1, ex.size) * err * 0.1
    for ext in (None, extra):
        zero_ab = error_bound(out, ex, np.zeros_like(ex), k, out_dtype=out_dtype, extra=ext)
        gamma = error_bound(out, ex, np.ones_like(ex), k, out_dtype=out_dtype) - error_bound(
            out, ex, np.zeros_like(ex), k, out_dtype=out_dtype)
        ab = np.maximum((err - zero_ab) / gamma, 0.0)
        ab = ab * (1 + rng.integers(-4, 5, ab.size) * 2.0**-52)  # straddle the bound
        bound = error_bound(out, ex, ab, k, out_dtype=out_dtype, extra=ext)
        ratio = bound_ratio(out, ex, ab, k, out_dtype=out_dtype, extra=ext)
        np.testing.assert_array_equal(err > bound, ratio > 1)
        near = np.abs(ratio - 1) < 1e-12
        assert np.any(near & (ratio > 1)) and np.any(near & (ratio <= 1))


def test_error_bound_of_a_nonfinite_output_is_the_bound_at_exact():
    ex, ab = np.array([3.0, -5.0]), np.array([4.0, 6.0])
    finite = error_bound(np.float32(ex), ex, ab, 64)
    for bad in (np.nan, np.inf, -np.inf):
        np.testing.assert_array_equal(
            error_bound(np.array([bad, bad], np.float32), ex, ab, 64), finite)


def test_bound_ratio_rejects_bad_input():
    one = np.ones(2)
    with pytest.raises(ValueError, match="float64"):
        bound_ratio(one, one.astype(np.float32), one, 4)
    with pytest.raises(ValueError, match="shape"):
        bound_ratio(one, np.ones(3), np.ones(3), 4)
    with pytest.raises(ValueError, match="NaN or Inf"):
        bound_ratio(one, np.array([1.0, np.nan]), one, 4)
    with pytest.raises(ValueError, match="narrower than float64"):
        bound_ratio(one, one, one, 4, out_dtype=np.float64)
    with pytest.raises(ValueError, match=">= 0"):
        bound_ratio(one, one, -one, 4)
    with pytest.raises(ValueError, match="k must"):
        bound_ratio(one, one, one, 0)
    with pytest.raises(ValueError, match="n\\*u < 1"):
        bound_ratio(one, one, one, 4, u=2.0**-8, n=512)


def test_bound_ratio_default_n_counts_block_scale_roundings():
    """n = k + 2 ceil(k/128) + 2: check against gamma_n by a case where only the
    gamma term is non-negligible."""
    k, u = 300, 2.0**-24
    n = k + 2 * math.ceil(k / 128) + 2
    abs_ab = np.array([2.0**40])
    exact = np.array([0.0])
    gamma = n * u / (1 - n * u)
    # float32 outputs of ~2^25: half their ulp is 1e-8 of the error, far inside the margin
    err = np.array([gamma * abs_ab[0] * 0.999], dtype=np.float32)
    assert bound_ratio(err, exact, abs_ab, k)[0] <= 1.0
    err = np.array([gamma * abs_ab[0] * 1.001], dtype=np.float32)
    assert bound_ratio(err, exact, abs_ab, k)[0] > 1.0


# ------------------------------------------------------------------- bias_z


def _round_toward_zero_f32(x: np.ndarray) -> np.ndarray:
    rn = x.astype(np.float32)
    overshoot = np.abs(rn.astype(np.float64)) > np.abs(x)
    return np.where(overshoot, np.nextafter(rn, np.float32(0)), rn)


def _round_down_f32(x: np.ndarray) -> np.ndarray:
    rn = x.astype(np.float32)
    return np.where(rn.astype(np.float64) > x, np.nextafter(rn, np.float32(-np.inf)), rn)


@pytest.mark.parametrize("seed", range(4))
def test_bias_z_separates_truncation_from_rne(seed):
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal(20000) * np.exp2(rng.integers(-10, 10, 20000))
    assert abs(bias_z(ref.astype(np.float32), ref)) < 4.0
    assert bias_z(_round_toward_zero_f32(ref), ref) < -50.0
    # round-down is a signed bias; on mixed signs it is no magnitude bias
    rd = _round_down_f32(ref)
    assert bias_z(rd, ref, mode="signed") < -50.0
    assert abs(bias_z(rd, ref, mode="magnitude")) < 4.0
    assert abs(bias_z(ref.astype(np.float32), ref, mode="signed")) < 4.0


def test_bias_z_edge_cases():
    x = np.array([1.0, -2.0, 3.0])
    assert bias_z(x, x) == 0.0
    p2 = np.array([1.0, -2.0, 4.0])  # powers of two: every normalised error is 2^-20
    assert bias_z(p2 * (1 + 2.0**-20), p2) == math.inf
    assert bias_z(np.array([1.0, np.nan, 3.0]), x) == math.inf
    assert bias_z(np.array([0.5, 0.0]), np.zeros(2)) > 0  # out bigger than a zero ref
    with pytest.raises(ValueError, match="at least 2"):
        bias_z(np.ones(1), np.ones(1))
    with pytest.raises(ValueError, match="mode"):
        bias_z(x, x, mode="up")


# -------------------------------------------------------------- error_ratio


def test_error_ratio_known_answers():
    ref = np.array([1.0, 2.0, 3.0])
    assert error_ratio(ref + [0, 0.5, 0], ref, ref + [0.25, 0, 0]) == 2.0
    assert error_ratio(ref, ref, ref) == 1.0
    assert error_ratio(ref + [0, 0, 1e-9], ref, ref) == math.inf
    assert error_ratio(ref, ref, ref + 1.0) == 0.0
    assert error_ratio(np.array([1.0, np.nan, 3.0]), ref, ref + 1) == math.inf
    with pytest.raises(ValueError, match="naive"):
        error_ratio(ref, ref, np.array([1.0, np.inf, 3.0]))
    with pytest.raises(ValueError, match="naive"):
        error_ratio(ref, ref, ref[:2])


def test_error_ratio_of_valid_block_orders_stays_below_two():
    """Every valid float32 order of a blockwise kernel is no worse than twice the naive
    dequantize-then-matmul path, on every one of many random orders (the gate's <= 2)."""
    from fp8check.references import dequantize, gmm, quantize
    from fp8check.references.baselines import naive_matmul

    rng = np.random.default_rng(21)
    x = rng.standard_normal((64, 1024)).astype(F32)
    w = rng.standard_normal((1, 1024, 256)).astype(F32)
    qa, qb = quantize(x), quantize(w, (128, 128))
    gs = np.array([64], np.int32)
    exact = gmm(qa, qb, gs, accum="exact", out_dtype=np.float64)
    naive = naive_matmul(dequantize(qa), dequantize(qb)[0]).astype(np.float64)
    a64, b64 = dequantize(qa, np.float64), dequantize(qb, np.float64)[0]
    blocks = [(a64[:, k:k + 128] @ b64[k:k + 128]).astype(F32) for k in range(0, 1024, 128)]
    worst = 0.0
    for _ in range(50):
        acc = np.zeros((64, 256), F32)
        for b in rng.permutation(len(blocks)):
            acc = acc + blocks[b]
        worst = max(worst, error_ratio(acc.astype(np.float64), exact, naive))
    assert worst <= 2.0, worst


def test_naive_matmul_is_the_float32_sum_in_k_order():
    """The error_ratio baseline, bit for bit against Python float32 scalars: each product
    rounded, then added in K order (no fma, no BLAS blocking), on rows of very different
    magnitudes and with cancellation."""
    from fp8check.references.baselines import naive_matmul

    rng = np.random.default_rng()
    a = (rng.standard_normal((5, 300)) * np.exp(rng.normal(0, 6, (5, 1)))).astype(F32)
    b = rng.standard_normal((300, 7)).astype(F32)
    b[:, 3] = b[:, 2]
    a[1, 150:] = -a[1, :150]  # exact cancellation halfway
    want = np.zeros((5, 7), F32)
    for i in range(5):
        for j in range(7):
            acc = F32(0)
            for t in range(300):
                acc = F32(acc + F32(a[i, t] * b[t, j]))
            want[i, j] = acc
    np.testing.assert_array_equal(naive_matmul(a, b).view(np.uint32), want.view(np.uint32))


def test_bias_z_clustered_has_no_false_alarm_where_scale_roundings_are_shared():
    """A bit-exact deepgemm-recipe output with one K block: every element of a (row, N tile)
    shares the rounding of RN(sa*sb).  Per element that looks like bias; per cluster it is
    not, and truncation is still caught."""
    from fp8check.references import gmm, quantize

    rng = np.random.default_rng(8)
    naive_worst, clustered_worst = 0.0, 0.0
    for _ in range(60):
        x = rng.standard_normal((2, 128)).astype(F32)
        w = rng.standard_normal((1, 128, 384)).astype(F32)
        qa, qb, gs = quantize(x), quantize(w, (128, 128)), np.array([2], np.int32)
        out = gmm(qa, qb, gs, accum="deepgemm")
        ref = gmm(qa, qb, gs, accum="exact")
        naive_worst = max(naive_worst, abs(bias_z(out, ref)))
        clustered_worst = max(clustered_worst,
                              abs(bias_z(out, ref, clusters=_row_tile_labels(out))))
    assert naive_worst > 6.0  # the per-element statistic really false-alarms here
    assert clustered_worst <= 6.0
    # With a few hundred clusters (the gate's case sizes) truncation is still far out.
    x = rng.standard_normal((64, 256)).astype(F32)
    w = rng.standard_normal((1, 256, 256)).astype(F32)
    qa, qb, gs = quantize(x), quantize(w, (128, 128)), np.array([64], np.int32)
    out = gmm(qa, qb, gs, accum="deepgemm")
    trunc = (out.view(np.uint32) & np.uint32(0xFFFF0000)).view(F32)  # toward zero, bf16
    ref16 = gmm(qa, qb, gs, accum="exact", out_dtype=BF16).astype(F32)
    assert bias_z(trunc, ref16, clusters=_row_tile_labels(trunc)) < -6.0


def _row_tile_labels(o: np.ndarray) -> np.ndarray:
    """One cluster label per (row, 128-wide N tile) of a [rows, N] output."""
    tiles = -(-o.shape[1] // 128)
    return np.arange(o.shape[0])[:, None] * tiles + np.arange(o.shape[1])[None, :] // 128


def test_bias_z_cluster_labels_checked():
    with pytest.raises(ValueError, match="at least 2 clusters"):
        bias_z(np.array([1.0, 2.5]), np.array([1.0, 2.0]), clusters=np.array([0, 0]))
    with pytest.raises(ValueError, match="integer labels"):
        bias_z(np.array([1.0, 2.5]), np.array([1.0, 2.0]), clusters=np.array([0.0, 1.0]))


def test_bias_z_clusters_dense_and_sparse_labels_agree():
    """Dense labels are counted directly, sparse ones through np.unique: the same
    partition in the same label order gives the same statistic either way, and empty
    label values in a dense range are not clusters."""
    rng = np.random.default_rng()
    ref = rng.standard_normal(3000)
    out = (ref * (1 + rng.normal(2e-8, 6e-8, ref.size))).astype(F32).astype(np.float64)
    dense = rng.integers(0, 40, ref.size) * 3  # every third value unused
    want = bias_z(out, ref, clusters=dense)
    assert want == bias_z(out, ref, clusters=dense + 10**6)  # shifted, still dense
    assert want == bias_z(out, ref, clusters=dense * 10**9 - 7)  # sparse: np.unique
    assert want == bias_z(out, ref, clusters=dense // 3)  # no empty values


# ------------------------------------------------ bias_z as a sign test (unit "sign")


def _directed_f32(x: np.ndarray, up: bool) -> np.ndarray:
    """float64 x rounded to float32 toward +inf (up) or -inf, from RN and np.nextafter
    where RN landed on the wrong side (RN32 is within one float32 step)."""
    r = x.astype(F32)
    wrong = r < x if up else r > x
    return np.where(wrong, np.nextafter(r, F32(np.inf if up else -np.inf)), r).astype(F32)


def test_bias_z_sign_unit_depends_on_the_error_signs_only():
    """Scaling each error by its own positive factor leaves the sign test unchanged; the
    binade statistic moves."""
    rng = np.random.default_rng(31)
    ref = rng.standard_normal(4000)
    out = ref + rng.normal(1e-9, 1e-8, ref.size)
    scaled = ref + (out - ref) * rng.uniform(0.1, 1000, ref.size)
    labels = np.arange(ref.size) // 10
    for mode in ("magnitude", "signed"):
        assert bias_z(out, ref, mode=mode, clusters=labels, unit="sign") == bias_z(
            scaled, ref, mode=mode, clusters=labels, unit="sign")
    assert bias_z(out, ref, mode="signed", clusters=labels) != bias_z(
        scaled, ref, mode="signed", clusters=labels)


def test_bias_z_sign_unit_catches_directed_rounding_past_an_outlier():
    """Round-up of sums with cancellation: one element whose exact value nearly cancels
    carries a relative error 10^6 times the others' and the opposite sign.  It drags the
    binade statistic to about 1; the sign test still sees every other element lean up."""
    rng = np.random.default_rng(32)
    terms = rng.standard_normal((3000, 8))
    ref = terms.sum(axis=1)
    up = _directed_f32(ref, up=True).astype(np.float64)
    down = _directed_f32(ref, up=False).astype(np.float64)
    up[7] = ref[7] - abs(ref[7]) * 2.0**-4  # the outlier
    labels = np.arange(ref.size) // 3
    assert abs(bias_z(up, ref, mode="signed", clusters=labels)) < 2.0
    assert bias_z(up, ref, mode="signed", clusters=labels, unit="sign") > 30.0
    assert bias_z(down, ref, mode="signed", clusters=labels, unit="sign") < -30.0
    # rounding up is away from zero for half the elements, toward it for the others
    assert abs(bias_z(down, ref, mode="magnitude", clusters=labels, unit="sign")) < 6.0


def test_bias_z_sign_unit_false_alarm_rate_of_round_to_nearest():
    """Round-to-nearest outputs of random sums, 300 draws of 512 clusters: the sign test
    is calibrated (about 5% of draws beyond 1.96, as the normal scale promises) and none
    comes near the gate's limit of 6."""
    rng = np.random.default_rng(33)
    zs = []
    for _ in range(300):
        ref = rng.standard_normal((512, 8)).sum(axis=1) * np.exp2(rng.integers(-20, 20, 512))
        ref = np.repeat(ref, 4) * rng.uniform(0.5, 2, 2048)
        out = ref.astype(F32)
        zs.append(bias_z(out, ref, mode="signed", clusters=np.arange(ref.size) // 4,
                         unit="sign"))
    zs = np.abs(np.array(zs))
    assert 0.02 <= np.mean(zs > 1.96) <= 0.09
    assert zs.max() < 5.0


def _cgm_z(s: np.ndarray, groups: np.ndarray, block: int = 128) -> float:
    """The crossed statistic written out independently: elementwise signs s [rows, N],
    clusters by row and by (group, `block`-column tile), Cameron-Gelbach-Miller's
    variance, Student's t on the normal scale through scipy."""
    from scipy import special, stats

    rows, n = s.shape
    m = s.mean()
    tile_lab = (groups[:, None] * 100000 + np.arange(n)[None, :] // block).ravel()
    row_lab = np.repeat(np.arange(rows), n)

    def v(lab: np.ndarray) -> tuple[float, int]:
        _, inv = np.unique(lab, return_inverse=True)
        sums, counts = np.bincount(inv, s.ravel()), np.bincount(inv)
        g = counts.size
        return g / (g - 1) * float(np.sum((sums - counts * m) ** 2)), g

    (va, ga), (vb, gb) = v(row_lab), v(tile_lab)
    ve = s.size / (s.size - 1) * float(np.sum((s - m) ** 2))
    t = m / np.sqrt(max(va + vb - ve, va, vb) / s.size**2)
    return math.copysign(-float(special.ndtri_exp(stats.t.logsf(abs(t), min(ga, gb) - 1))), t)


def _rows_in_groups(sizes: list[int]) -> np.ndarray:
    return np.repeat(np.arange(len(sizes)), sizes)


def test_bias_z_crossed_is_cameron_gelbach_miller():
    """`bias_sums` + `bias_z_crossed` against the statistic written out with numpy on the
    elementwise signs, both modes, on a mix of directed and nearest rounding."""
    from fp8check.measures.metrics import bias_sums, bias_z_crossed

    rng = np.random.default_rng(35)
    groups = _rows_in_groups([3, 20, 0, 14])
    ref = rng.standard_normal((37, 300))
    out = _directed_f32(ref, up=True).astype(np.float64)
    rn = rng.random(ref.shape) < 0.97
    out[rn] = ref.astype(F32)[rn]
    for mode in ("magnitude", "signed"):
        d = np.sign(ref) if mode == "magnitude" else 1.0
        for block in (1, 128):
            got = bias_z_crossed(bias_sums(out, ref, groups, 4, mode=mode, block=block))
            want = _cgm_z(d * np.sign(out - ref), groups, block)
            assert got == pytest.approx(want, rel=1e-9)


def test_bias_sums_of_row_chunks_give_the_whole_outputs_statistic():
    """The streamed path's reduction: the sums of row chunks added give the whole output's
    sums and statistic, bit for bit, in both modes."""
    from fp8check.measures.metrics import BiasChunks, bias_sums, bias_z_crossed

    rng = np.random.default_rng(34)
    groups = _rows_in_groups([5, 12, 20])
    ref = rng.standard_normal((37, 300))
    out = _directed_f32(ref, up=True).astype(np.float64)
    rn = rng.random(ref.shape) < 0.6  # a mix of round-up and round-to-nearest
    out[rn] = ref.astype(F32)[rn]
    for mode in ("magnitude", "signed"):
        whole = bias_sums(out, ref, groups, 3, mode=mode, block=128)
        chunks = BiasChunks(3, 300, 128)
        for r0 in range(0, 37, 5):
            chunks.add_sums(bias_sums(out[r0:r0 + 5], ref[r0:r0 + 5], groups[r0:r0 + 5], 3,
                                      mode=mode, block=128))
        parts = chunks.sums()
        for a, b in zip(vars(whole).values(), vars(parts).values(), strict=True):
            np.testing.assert_array_equal(a, b)
        assert bias_z_crossed(whole) == bias_z_crossed(parts)
    with pytest.raises(ValueError, match="row_groups"):
        bias_sums(out, ref, groups[:-1], 3, mode="signed")
    with pytest.raises(ValueError, match="row_groups"):
        bias_sums(out, ref, groups, 2, mode="signed")
    with pytest.raises(ValueError, match="block"):
        bias_sums(out, ref, groups, 3, mode="signed", block=0)
    with pytest.raises(ValueError, match="at least 2 rows"):
        bias_z_crossed(bias_sums(out[:1], ref[:1], groups[:1], 3, mode="signed"))
    with pytest.raises(ValueError, match="unit"):
        bias_z(out, ref, unit="ulp")


def test_bias_z_crossed_has_no_false_alarm_where_a_groups_tiles_share_roundings():
    """Round-to-nearest outputs whose errors lean together over a group's N tile (a
    kernel that dequantizes its weights: each 128x128 block's roundings alike over its
    columns) and over a row: clustering by rows alone false-alarms, the crossed
    statistic stays calibrated, and a directed rounding is still far out."""
    from fp8check.measures.metrics import bias_sums, bias_z_crossed

    rng = np.random.default_rng(36)
    groups = _rows_in_groups([200, 3, 5, 40])
    one_way, crossed = [], []
    for _ in range(150):
        ref = rng.standard_normal((248, 512)) * np.exp(rng.normal(0, 3, (248, 1)))
        lean = (rng.normal(0, 1.0, (4, 4))[groups][:, np.arange(512) // 128]
                + rng.normal(0, 0.5, (248, 1)))  # per (group, tile) and per row
        up = rng.random(ref.shape) < 1 / (1 + np.exp(-lean))
        out = np.where(up, _directed_f32(ref, True), _directed_f32(ref, False)).astype(
            np.float64)
        rn = rng.random(ref.shape) < 0.5  # the rest round to nearest
        out[rn] = ref.astype(F32)[rn]
        s = np.sign(out - ref)
        one_way.append(abs(bias_z(out, ref, mode="signed", clusters=np.repeat(
            np.arange(248), 512).reshape(248, 512), unit="sign")))
        crossed.append(abs(bias_z_crossed(bias_sums(out, ref, groups, 4, mode="signed",
                                                     block=128))))
        assert crossed[-1] == pytest.approx(abs(_cgm_z(s, groups)), rel=1e-9)
    assert max(one_way) > 6.0  # rows alone miss the tiles' shared lean
    assert max(crossed) < 6.0 and np.mean(np.array(crossed) > 1.96) <= 0.15
    ref = rng.standard_normal((248, 512))
    up = _directed_f32(ref, True).astype(np.float64)
    rn = rng.random(ref.shape) < 0.7
    up[rn] = ref.astype(F32)[rn]  # 30% of the elements rounded up, the rest to nearest
    assert bias_z_crossed(bias_sums(up, ref, groups, 4, mode="signed", block=128)) > 6.0


def test_row_groups_of_gmm_and_tgmm_outputs():
    from fp8check.measures.metrics import row_groups

    g, n = row_groups((9, 256), np.array([2, 0, 7]))
    assert g.tolist() == [0, 0, 2, 2, 2, 2, 2, 2, 2] and n == 3
    g, n = row_groups((3, 4, 256), np.array([5, 0, 1]))  # tgmm: expert g's K rows
    assert g.tolist() == [0] * 4 + [1] * 4 + [2] * 4 and n == 3


def test_bias_z_errors_cancelling_within_every_cluster_is_zero():
    """One element up and one down in every cluster: no lean, 0 (not inf)."""
    ref = np.array([1.0, 2.0, 3.0, 4.0])
    out = ref + np.array([1e-3, -1e-3, 1e-3, -1e-3])
    assert bias_z(out, ref, mode="signed", clusters=np.array([0, 0, 1, 1]), unit="sign") == 0
