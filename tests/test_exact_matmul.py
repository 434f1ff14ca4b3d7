"""The exact matmul behind plain gmm, tgmm and dgrad, and the certified rounding it and the
exact FP8 recipe rest on: against exact rationals and the term-by-term superaccumulator,
on every path, on data built to sit on rounding boundaries."""

from fractions import Fraction as F

import ml_dtypes
import numpy as np
import pytest

from fp8check.references import bf16_matmul, certified, dgrad, gmm, matmul, quantize, tgmm
from fp8check.references.exact import precision_of
from tests.oracle import round_fraction

BF16 = np.dtype(ml_dtypes.bfloat16)
FMT = {np.dtype(np.float32): "f32", BF16: "bf16", np.dtype(np.float64): "f64"}
OUT_DTYPES = [np.dtype(np.float32), BF16, np.dtype(np.float64)]
# matmul._SPARSE_FRACTION forcing each path, and whether bf16 operands may take the
# integer one (`bf16_matmul`, where this CPU has it)
PATHS = {"fast": (np.inf, False), "dense": (0.0, False), "integer": (np.inf, True)}
# (path, operand dtype) pairs: every path with bf16 operands, the split paths with float32
# ones too (the integer path takes bf16 operands only)
PATH_DTYPES = [pytest.param(p, d, id=f"{p}-{FMT[np.dtype(d)]}") for p in sorted(PATHS)
               for d in (np.float32, BF16) if not PATHS[p][1] or np.dtype(d) == BF16]


def use_path(monkeypatch, path: str) -> None:
    """Send exact_matmul down `path` (PATHS); skip "integer" where this CPU lacks it."""
    fraction, integer_on = PATHS[path]
    if integer_on and not bf16_matmul.AVAILABLE:
        pytest.skip(f"the integer bf16 path is {bf16_matmul.STATUS} on this machine")
    monkeypatch.setattr(matmul, "_SPARSE_FRACTION", fraction)
    monkeypatch.setattr(bf16_matmul, "AVAILABLE", integer_on)


def _wide(rng, shape, spread, dtype):
    """Normal values times 2^U(-spread, spread) per element, with a zero row and column,
    as `dtype` values."""
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, shape))
    x[0] = 0.0
    x[:, -1] = 0.0
    return x.astype(dtype)


def _f32(x):
    """The float32 image of float32 / bf16 values (exact)."""
    return np.asarray(x).astype(np.float32)


def _same_bits(got, want):
    """Equal as values, zeros' signs and NaNs included."""
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert g.shape == w.shape
    same = (g.view(np.int64) == w.view(np.int64)) | (np.isnan(g) & np.isnan(w))
    bad = np.argwhere(~same)
    assert not bad.size, f"{bad.shape[0]} elements differ, first at {tuple(bad[0])}: " \
                         f"{g[tuple(bad[0])]!r} vs {w[tuple(bad[0])]!r}"


def _oracle(a, b, fmt):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.array([[round_fraction(sum((F(a[i, t]) * F(b[t, j]) for t in range(a.shape[1])),
                                         F(0)), fmt)
                      for j in range(b.shape[1])] for i in range(a.shape[0])])


# ---- certified rounding ----------------------------------------------------------------

def _interval_rounds_to(r, lo: F, hi: F, fmt) -> bool:
    return round_fraction(lo, fmt) == r == round_fraction(hi, fmt) and (
        r != 0 or (lo > 0) == (hi > 0))


@pytest.mark.parametrize("fmt", ["f32", "bf16", "f64"])
def test_round_certified_is_never_wrong_when_it_says_certain(fmt):
    """Pairs s + e and bounds placed at, just inside and just outside rounding midpoints,
    powers of two, the subnormal range and zero: whenever the flag says certain, every real
    of the interval [s + e - err, s + e + err] rounds to the returned value (both ends
    checked in exact rationals; rounding is monotonic), and most clear cases are certain."""
    p, emin = {"f32": (24, -126), "bf16": (8, -126), "f64": (53, -1022)}[fmt]
    rng = np.random.default_rng(p)
    n_certain = 0
    for trial in range(4000):
        e_exp = int(rng.choice([0, 5, -30, emin + 3, emin - p - 2, emin - 5]))
        base = float(rng.integers(2**(p - 1), 2**p)) * 2.0**(e_exp - p + 1)
        kind = trial % 5
        if kind == 0:  # a midpoint, nudged by a few float64 ulps or not at all
            s = base + 2.0**(max(e_exp, emin) - p) * (1 + 2.0**-30 * rng.integers(-3, 4))
        elif kind == 1:  # a power of two and its neighbours
            s = np.nextafter(2.0**e_exp, rng.choice([0.0, np.inf]))
        elif kind == 2:
            s = base
        elif kind == 3:
            s = base * (1 + rng.random() * 2.0**(1 - p))
        else:
            s = float(rng.random()) * 2.0**(emin - p)  # at or below half the smallest step
        s = float(s) * rng.choice([-1.0, 1.0])
        ulp53 = np.spacing(abs(s)) if s else 2.0**-1074
        e = float(rng.choice([0.0, ulp53 / 4, -ulp53 / 3, ulp53 / 2]))
        err = float(rng.choice([0.0, 0.0, ulp53, ulp53 * 2.0**20, abs(s) * 2.0**-60]))
        r, certain = certified.round_certified(s, e, err, p, emin)
        if certain:
            n_certain += 1
            mid = F(s) + F(e)
            assert _interval_rounds_to(r, mid - F(err), mid + F(err), fmt), (s, e, err, r)
        if e == 0.0 and err == 0.0:
            want = round_fraction(F(s), fmt)
            assert certain and r == want and np.signbit(r) == np.signbit(want), (s, r)
    assert n_certain > 2000


def test_round_certified_refuses_non_finite_values():
    for s, e, err in ((np.inf, 0.0, 0.0), (np.nan, 0.0, 0.0), (1.0, 0.0, np.inf)):
        assert not certified.round_certified(s, e, err, 24, -126)[1]


# ---- exact matmul, every path ----------------------------------------------------------

@pytest.mark.parametrize("path, dtype", PATH_DTYPES)
@pytest.mark.parametrize("spread, k", [(0, 4096), (8, 700), (40, 300)])
def test_exact_matmul_equals_term_by_term(monkeypatch, path, dtype, spread, k):
    """Against the superaccumulator over every product (tested against rationals in
    test_exact.py): near-max values of one sign at k = 4096 fill BLAS's 53 bits (2 beta +
    log2 k = 52; two more bits of beta and float64 rounds these sums); wide spreads put
    nonzeros in most remainders (the fast path then corrects nearly everything, the dense
    one needs several slices or the term path).  Row- and column-major operands alike."""
    use_path(monkeypatch, path)
    rng = np.random.default_rng(k + spread)
    a = _wide(rng, (33, k), spread, dtype)
    b = _wide(rng, (k, 17), spread, dtype)
    if spread == 0:  # all in [1.9, 2): every slice integer near 2^beta, sums near 2^53
        a, b = ((1.9 + 0.099 * rng.random(x.shape)).astype(dtype) for x in (a, b))
    for dt in OUT_DTYPES:
        want = matmul.exact_matmul_terms(_f32(a), _f32(b), *precision_of(dt)).astype(dt)
        _same_bits(matmul.exact_matmul(a, b, dt), want)
        _same_bits(matmul.exact_matmul(np.asfortranarray(a), b.T.copy().T, dt), want)


def _boundary_problem(rng, dtype):
    """Rows whose exact sums sit on the output formats' rounding boundaries: a float32 tie,
    a tie broken by a term 2^-60 further down, just below a bf16 tie, exact cancellation
    down to a subnormal, a sum that is a float32 subnormal but below half bf16's smallest
    (a signed zero there), and a sum past float32's range (inf in float32 and bf16); the
    rest Gaussian."""
    k, n = 64, 9
    a = rng.standard_normal((12, k))
    b = rng.standard_normal((k, n))
    a[:6] = 0.0
    b[:4, :] = 1.0
    a[0, :2] = [1.0, 2.0**-24]  # 1 + 2^-24: a float32 tie, to even
    a[1, :3] = [1.0, 2.0**-24, 2.0**-60]  # just above the tie
    a[2, :3] = [1.0, 2.0**-8, -(2.0**-70)]  # just below a bf16 tie
    a[3, :3] = [3.0, -3.0, 2.0**-130]  # cancels to a subnormal
    a[4, :3] = [-(2.0**-100), 2.0**-100, -(2.0**-40)]  # times column 0: -2^-140
    a[5, :2] = [2.0**127, 2.0**127]  # 2^128: inf in float32 and bf16
    # 2^31 + 128 + 2^-60: just above a float32 tie, where the fast path's float64 sum of
    # the remainders (63 + 63 + 2 + 2^-60 -> 128) lands on the tie itself.
    a[6] = 0.0
    a[6, :5] = [2.0**31, 63.0, 63.0, 2.0, 2.0**-60]
    b[:5, 1:] = 1.0
    b[:, 0] = 2.0**-100
    return a.astype(dtype), b.astype(dtype)


@pytest.mark.parametrize("path, dtype", PATH_DTYPES)
def test_exact_matmul_on_rounding_boundaries_matches_rationals(monkeypatch, path, dtype):
    use_path(monkeypatch, path)
    a, b = _boundary_problem(np.random.default_rng(7), dtype)
    for dt in OUT_DTYPES:
        _same_bits(matmul.exact_matmul(a, b, dt), _oracle(a, b, FMT[dt]))


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16], ids=["f32", "bf16"])
def test_exact_matmul_non_finite_inputs_reach_exactly_their_elements(dtype):
    """NaN and +-inf in a row of a and a column of b: the elements they reach get IEEE's
    value of the sum (NaN where inf meets a zero or -inf, else the infinity), every other
    element the exact value."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((6, 40)).astype(dtype)
    b = rng.standard_normal((40, 5)).astype(dtype)
    a[1, 3], a[2, 4], a[3, 5], a[3, 6] = np.nan, np.inf, np.inf, -np.inf
    b[7, 2] = -np.inf
    b[8, 4], a[4, 8] = np.inf, 0.0
    reached = np.zeros((6, 5), bool)
    reached[[1, 2, 3]] = True
    reached[:, [2, 4]] = True
    ieee = np.array([[sum(float(a[i, t]) * float(b[t, j]) for t in range(40))  # Python floats
                      for j in range(5)] for i in range(6)])
    assert not np.isfinite(ieee[reached]).any() and np.isnan(ieee[1]).all()
    assert np.isnan(ieee[2, 2]) and np.isnan(ieee[4, 4]) and np.isinf(ieee[reached]).any()
    clean_a, clean_b = np.where(np.isfinite(a), a, 0), np.where(np.isfinite(b), b, 0)
    for dt in OUT_DTYPES:
        got = matmul.exact_matmul(a, b, dt).astype(np.float64)
        _same_bits(got[reached], ieee[reached])
        want = _oracle(clean_a, clean_b, FMT[np.dtype(dt)])
        _same_bits(got[~reached], want[~reached])


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("layout", ["C", "F", "strided"])
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16], ids=["f32", "bf16"])
def test_split_top_is_the_rint_split_per_line_in_every_layout(axis, layout, dtype):
    """split_top against its definition, line by line in numpy: hi = rint(x / unit) unit
    with unit = 2^(floor(log2 max|line|) + 1 - beta), nnz the nonzeros of x - hi; on wide
    float32 and bf16 data (read from their bits) with an all-zero row and column,
    subnormal values and ties of rint (x / unit = j + 1/2), in C, Fortran and
    non-contiguous layouts; hi keeps the layout.  One infinity or NaN anywhere clears the
    finite flag."""
    rng = np.random.default_rng(axis * 3 + len(layout))
    x = _wide(rng, (70, 90), 30, dtype)
    x[5, :7] = 2.0**-140 if dtype == np.float32 else 2.0**-130  # subnormals of each
    x[9] = 0.0
    x[9, 0] = 0.5  # the row's max: unit 2^(-1 + 1 - 20)
    x[9, 1:4] = (np.arange(3) + 0.5) * 2.0**-20  # rint ties in that unit
    beta = 20
    if layout == "F":
        x = np.asfortranarray(x)
    elif layout == "strided":
        x = np.repeat(x, 2, axis=1)[:, ::2]
    hi, nnz, finite = matmul.split_top(x, beta, axis)
    assert finite
    x64 = x.astype(np.float64)
    assert (x64[5, :7] != 0).all()
    lines = x64 if axis == 1 else x64.T
    want_hi = np.empty(lines.shape)
    for i, line in enumerate(lines):
        mu = np.abs(line).max()
        unit = 2.0 ** (np.frexp(mu)[1] - beta) if mu > 0 else 2.0 ** (1 - beta)
        want_hi[i] = np.rint(line / unit) * unit
    want_hi = want_hi if axis == 1 else want_hi.T
    _same_bits(hi, want_hi)
    np.testing.assert_array_equal(nnz, np.count_nonzero(x64 - want_hi, axis=axis))
    assert hi.flags.f_contiguous == (layout == "F")
    if axis == 1:  # ties to even
        assert (hi[9, 1:4] == np.array([0, 2, 2]) * 2.0**-20).all()
    for value in (np.inf, -np.inf, np.nan):  # the flag that sends exact_matmul elsewhere
        y = x.copy()
        y[7, 11] = value
        assert not matmul.split_top(y, beta, axis)[2]


def test_slices_split_exactly_into_narrow_integers():
    rng = np.random.default_rng(0)
    for spread in (0, 12, 40):
        x = _wide(rng, (40, 300), spread, np.float32)
        parts = matmul.slices(x, 20, 64)
        assert parts is not None
        total = np.zeros(x.shape)
        for part in parts:
            for row in part:  # integers of magnitude <= 2^beta times one power of two
                nz = row[row != 0]
                if nz.size:
                    mant, exp = np.frexp(nz)
                    ints = (np.abs(mant) * 2.0**53).astype(np.int64)
                    lsb = np.ldexp(1.0, exp - 53) * (ints & -ints)
                    assert np.abs(nz).max() <= 2.0**20 * lsb.min()
            total += part
        assert (total == x).all()
        if len(parts) > 1:
            assert matmul.slices(x, 20, len(parts) - 1) is None


# ---- through tgmm, dgrad and plain gmm, at sizes that take the fast path ----------------

def test_tgmm_dgrad_and_plain_gmm_take_the_fast_path_exactly(monkeypatch):
    """Gaussian bf16 operands with a few tiny values (so remainders are sparse but not
    empty), groups of realistic size with an empty one: each result equals the
    term-by-term superaccumulator per group, and the fast path's corrections ran (the
    integer path off: tests/test_bf16_matmul.py has its own)."""
    use_path(monkeypatch, "fast")
    calls = []
    real = matmul._round_block
    monkeypatch.setattr(matmul, "_round_block",
                        lambda rows, cols, *rest: calls.append(rows.size) or real(rows, cols,
                                                                                   *rest))
    rng = np.random.default_rng(11)
    m, k, n = 700, 256, 130
    x = rng.standard_normal((m, k))
    x[rng.random(x.shape) < 0.002] *= 2.0**-20
    dy = rng.standard_normal((m, n))
    dy[rng.random(dy.shape) < 0.002] *= 2.0**-20
    w = rng.standard_normal((3, k, n))
    x, dy, w = (v.astype(ml_dtypes.bfloat16) for v in (x, dy, w))
    gs = np.array([300, 0, 380], np.int32)
    x32, d32, w32 = (_f32(v) for v in (x, dy, w))
    for dt in OUT_DTYPES:
        prec = precision_of(dt)
        dw, dx = tgmm(x, dy, gs, out_dtype=dt), dgrad(dy, w, gs, out_dtype=dt)
        fx = gmm(x, w, gs, out_dtype=dt)
        assert (dw[1] == 0).all() and (dx[680:] == 0).all() and (fx[680:] == 0).all()
        for g, (r0, r1) in ((0, (0, 300)), (2, (300, 680))):
            term = matmul.exact_matmul_terms
            _same_bits(dw[g], term(np.ascontiguousarray(x32[r0:r1].T), d32[r0:r1],
                                   *prec).astype(dt))
            _same_bits(dx[r0:r1], term(d32[r0:r1], np.ascontiguousarray(w32[g].T),
                                       *prec).astype(dt))
            _same_bits(fx[r0:r1], term(x32[r0:r1], w32[g], *prec).astype(dt))
    assert calls and sum(calls) > 0


# ---- the exact FP8 recipe (certified compensated sums) ---------------------------------

@pytest.mark.parametrize("out", OUT_DTYPES, ids=lambda d: FMT[d])
def test_exact_fp8_recipe_matches_term_by_term_on_wide_scales(out):
    """Scales spread over 2^-60 .. 2^60 per block, so the scaled partials of one output
    cancel and straddle many binades: the certified sum must equal the superaccumulator's
    for every element (`certified.scaled_terms_exact` is the fallback itself, run here on
    every element as the oracle)."""
    rng = np.random.default_rng(5)
    m, k, n = 40, 1024, 128
    qa = quantize(rng.standard_normal((m, k)).astype(np.float32), (1, 128))
    qb = quantize(rng.standard_normal((1, k, n)).astype(np.float32), (128, 128))
    sa = (qa.scales * np.exp2(rng.integers(-60, 61, qa.scales.shape))).astype(np.float32)
    qa = type(qa)(qa.values, sa, qa.block, qa.fmt, qa.recipe)
    got = gmm(qa, qb, np.array([m], np.int32), out_dtype=out, accum="exact")
    a64 = qa.values.astype(np.float64)
    b64 = qb.values[0].astype(np.float64)
    kb = k // 128
    p_hi = np.stack([a64[:, 128 * i:128 * (i + 1)] @ b64[128 * i:128 * (i + 1)]
                     for i in range(kb)])  # exact e4m3 partials (references.gmm's argument)
    sb = np.repeat(qb.scales[0], 128, axis=1)[:, :n].astype(np.float32)
    prec = precision_of(out)
    want = np.array([[certified.scaled_terms_exact(p_hi, np.zeros((0, 0, 0)), sa, sb, i, j,
                                                   *prec) for j in range(n)]
                     for i in range(m)]).astype(out)
    _same_bits(got, want)


def test_exact_fp8_recipe_certifies_against_the_float64_error_of_its_sum():
    """Scaled partials 2^31, 128 + 2^-30, 2^-90, -2^-30: the running sum sits exactly on
    a float32 tie (2^31 + 128) while the TwoSum errors' float64 sum (2^-30 + 2^-90 - 2^-30)
    comes out 0 instead of 2^-90, so only the error bound keeps the tie from being
    rounded to even: the true value lies above it."""
    from fp8check.references.gmm import _accumulate_exact

    terms = [2.0**31, 128.0 + 2.0**-30, 2.0**-90, -(2.0**-30)]
    p_hi = np.array(terms).reshape(4, 1, 1)
    ones = np.ones((1, 4), np.float32)
    exact = sum((F(x) for x in terms), F(0))
    for fmt, (p, emin) in (("f32", (24, -126)), ("bf16", (8, -126)), ("f64", (53, -1022))):
        got = _accumulate_exact(p_hi, np.zeros((0, 0, 0)), ones, ones.T.copy(), p, emin)
        assert got[0, 0] == round_fraction(exact, fmt), fmt


def test_exact_matmul_matches_rationals_on_a_small_wide_problem():
    rng = np.random.default_rng(5)
    a = _wide(rng, (6, 40), 30, np.float32)
    b = _wide(rng, (40, 5), 30, np.float32)
    for dt in OUT_DTYPES:
        _same_bits(matmul.exact_matmul(a, b, dt), _oracle(a, b, FMT[dt]))


def test_exact_matmul_refuses_other_operand_dtypes():
    """Its exactness argument holds for float32 and bf16 values only: a float64 operand is
    bad usage, never rounded silently."""
    a = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="b must be float32 or bfloat16, got float64"):
        matmul.exact_matmul(a, np.ones((3, 2)), np.float32)
