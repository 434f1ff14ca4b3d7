"""Reference gmm / tgmm / dgrad against exact-rational emulations of each recipe."""

from fractions import Fraction as F

import ml_dtypes
import numpy as np
import pytest

from fp8check.references import QTensor, abs_product, dequantize, dgrad, gmm, quantize, tgmm
from tests.oracle import fma_f32, rn32, round_fraction
from tests.test_forward_refs import _PoisonedEmpty

UNIT = {"e4m3fn": 9, "e5m2": 16}  # every value is an integer multiple of 2^-UNIT


def _int_image(values: np.ndarray, fmt: str) -> np.ndarray:
    """fp8 values as exact Python integers times 2^-UNIT (object array)."""
    scaled = values.astype(np.float64) * 2.0 ** UNIT[fmt]
    assert (scaled == np.round(scaled)).all()
    return np.vectorize(int, otypes=[object])(scaled)


def _oracle_gmm(qa, qb, gs, accum, out_fmt):
    """Element by element with exact integers for the partials and Fractions for the rest."""
    m, k = qa.values.shape
    g, _, n = qb.values.shape
    kb = k // 128
    ia, ib = _int_image(qa.values, qa.fmt), _int_image(qb.values, qb.fmt)
    unit = F(1, 2 ** (2 * UNIT[qa.fmt]))
    out = np.zeros((m, n), np.float64)
    offs = np.concatenate([[0], np.cumsum(gs)])
    for gi in range(g):
        for i in range(offs[gi], offs[gi + 1]):
            for j in range(n):
                acc, exact = 0.0, F(0)
                for b in range(kb):
                    ks = slice(128 * b, 128 * (b + 1))
                    p_exact = int(np.dot(ia[i, ks], ib[gi, ks, j])) * unit
                    p = rn32(p_exact)
                    sa = float(qa.scales[i, b])
                    sb = float(qb.scales[gi, b, j // 128])
                    exact += p_exact * F(sa) * F(sb)
                    if accum == "deepgemm":
                        acc = fma_f32(rn32(F(sa) * F(sb)), p, acc)
                    elif accum == "cublas":
                        acc = fma_f32(rn32(F(p) * F(sa)), sb, acc)
                    elif accum == "tokamax":
                        acc = rn32(F(rn32(F(rn32(F(p) * F(sa))) * F(sb))) + F(acc))
                out[i, j] = (
                    round_fraction(exact, out_fmt) if accum == "exact"
                    else round_fraction(F(acc), out_fmt)
                )
    return out


def _problem(rng, fmt="e4m3fn", m=24, k=512, n=256, gs=(7, 0, 12, 3), scale_spread=12):
    # Rows and experts of very different magnitudes: scales differ across blocks.
    x = rng.standard_normal((m, k)) * 2.0 ** rng.integers(-scale_spread, scale_spread, (m, 1))
    x *= 2.0 ** rng.integers(-4, 4, (1, k // 128)).repeat(128, 1)
    w = rng.standard_normal((len(gs), k, n)) * 2.0 ** rng.integers(-6, 6, (len(gs), 1, 1))
    qa = quantize(x.astype(np.float32), (1, 128), fmt=fmt)
    qb = quantize(w.astype(np.float32), (128, 128), fmt=fmt)
    return qa, qb, np.array(gs, np.int32)


@pytest.mark.parametrize("accum", ["deepgemm", "cublas", "tokamax", "exact"])
@pytest.mark.parametrize("out", ["f32", "bf16"])
def test_recipes_match_rational_emulation(accum, out):
    rng = np.random.default_rng(hash((accum, out)) % 2**32)
    qa, qb, gs = _problem(rng)
    dt = np.float32 if out == "f32" else ml_dtypes.bfloat16
    got = gmm(qa, qb, gs, out_dtype=dt, accum=accum).astype(np.float64)
    want = _oracle_gmm(qa, qb, gs, accum, out)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("accum", ["deepgemm", "cublas"])
def test_fma_rounds_once_where_float64_would_double_round(accum):
    """A K-block step whose float64 sum x*y + acc lands exactly on a float32 midpoint
    while the true value lies 2^-70 below it: the fma rounds down to 1 + 2^-23, a float64
    multiply-add then float32 cast rounds the midpoint to even, 1 + 2^-22.  Row 129 of 130
    (the last parallel chunk of the fused path) holds it; the other rows are zero."""
    m, k, n = 130, 256, 128
    e = F(1, 2**23)
    lhs = np.zeros((m, k), ml_dtypes.float8_e4m3fn)
    rhs = np.zeros((1, k, n), ml_dtypes.float8_e4m3fn)
    sa = np.ones((m, 2), np.float32)
    sb = np.ones((1, 2, 1), np.float32)
    lhs[129, 0] = lhs[129, 128] = 2.0
    rhs[0, 0, 0] = rhs[0, 128, 0] = 16.0
    sa[129] = [float(F(1, 2**5) * (1 + e)), float(F(1, 2**29) * (1 + e))]
    if accum == "deepgemm":  # x = RN(sa*sb) = sa, y = P = 32 - 2^-18 = 2^5 (1 - 2^-23)
        lhs[129, 129], rhs[0, 129, 0] = 2.0**-9, -(2.0**-9)
    else:  # x = RN(P*sa) = 2^-24 (1 + 2^-23), y = sb = 1 - 2^-23
        sb[0, 1, 0] = float(1 - e)
    qa = QTensor(lhs, sa, (1, 128), "e4m3fn", "deepgemm")
    qb = QTensor(rhs, sb, (128, 128), "e4m3fn", "deepgemm")
    gs = np.array([m], np.int32)
    got = gmm(qa, qb, gs, accum=accum).astype(np.float64)
    np.testing.assert_array_equal(got, _oracle_gmm(qa, qb, gs, accum, "f32"))
    assert got[129, 0] == float(1 + e)
    naive = np.float32(np.float64(np.float32(1 + e)) + float(F(1, 2**24) * (1 - e * e)))
    assert float(naive) == float(1 + 2 * e)  # what a double rounding would have given


@pytest.mark.parametrize("accum", ["deepgemm", "cublas", "tokamax"])
def test_recipes_in_the_float32_subnormal_range(accum):
    """Scales that put products and accumulators below 2^-126: there float32 midpoints
    have fewer bits than the fast path's bit-pattern screen reads, so it sends every such
    element to the exact fma; that path, gradual underflow and the final bf16/f32 cast
    must all agree with the rational oracle."""
    qa, qb, gs = _problem(np.random.default_rng(21), m=70, n=128, gs=(30, 0, 40, 0))
    qa = QTensor(qa.values, (qa.scales * np.float32(2.0**-60)).astype(np.float32), qa.block,
                 qa.fmt, qa.recipe)
    qb = QTensor(qb.values, (qb.scales * np.float32(2.0**-70)).astype(np.float32), qb.block,
                 qb.fmt, qb.recipe)
    got = gmm(qa, qb, gs, accum=accum)
    assert np.count_nonzero((got != 0) & (np.abs(got) < 2.0**-126)) > 1000
    np.testing.assert_array_equal(got.astype(np.float64), _oracle_gmm(qa, qb, gs, accum, "f32"))


def test_recipes_really_differ():
    """The recipes are distinct functions: on random data each pair disagrees somewhere."""
    qa, qb, gs = _problem(np.random.default_rng(0), m=64)
    outs = {a: gmm(qa, qb, gs, accum=a) for a in ("deepgemm", "cublas", "tokamax", "exact")}
    names = list(outs)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert (outs[a] != outs[b]).any(), (a, b)


def test_exact_float64_output_and_e5m2():
    rng = np.random.default_rng(2)
    qa, qb, gs = _problem(rng, fmt="e5m2", m=10, n=128, gs=(4, 5))
    got = gmm(qa, qb, gs, out_dtype=np.float64, accum="exact")
    np.testing.assert_array_equal(got, _oracle_gmm(qa, qb, gs, "exact", "f64"))
    got32 = gmm(qa, qb, gs, accum="deepgemm")
    np.testing.assert_array_equal(got32, _oracle_gmm(qa, qb, gs, "deepgemm", "f32"))


def test_rows_past_the_groups_are_zero_and_empty_groups_are_fine():
    qa, qb, gs = _problem(np.random.default_rng(4), m=40, gs=(0, 9, 0, 20))
    for accum in ("deepgemm", "exact"):
        out = gmm(qa, qb, gs, accum=accum)
        assert (out[29:] == 0).all() and (out[:29] != 0).any()
    out = gmm(qa, qb, np.zeros(4, np.int32))
    assert (out == 0).all()


def test_plain_operands_exact():
    rng = np.random.default_rng(8)
    a = (rng.standard_normal((9, 130)) * 2.0 ** rng.integers(-30, 30, (9, 130)))
    b = rng.standard_normal((2, 130, 5))
    a, b = a.astype(ml_dtypes.bfloat16), b.astype(np.float32)
    gs = np.array([4, 3], np.int32)
    got = gmm(a, b, gs)
    af, bf = a.astype(np.float64), b.astype(np.float64)
    for i in range(9):
        g = 0 if i < 4 else 1
        for j in range(5):
            want = sum(F(af[i, t]) * F(bf[g, t, j]) for t in range(130)) if i < 7 else F(0)
            assert got[i, j] == round_fraction(want, "f32")


def test_tgmm_and_dgrad_exact_per_group():
    rng = np.random.default_rng(9)
    m, k, n = 11, 6, 7
    x = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    dy = rng.standard_normal((m, n)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((3, k, n)).astype(ml_dtypes.bfloat16)
    gs = np.array([5, 0, 4], np.int32)  # two trailing rows belong to no group
    dw = tgmm(x, dy, gs, out_dtype=np.float64)
    dx = dgrad(dy, w, gs, out_dtype=np.float64)
    xf, df, wf = (v.astype(np.float64) for v in (x, dy, w))
    offs = [0, 5, 5, 9]
    for g in range(3):
        rows = range(offs[g], offs[g + 1])
        for a in range(k):
            for b in range(n):
                want = sum((F(xf[r, a]) * F(df[r, b]) for r in rows), F(0))
                assert dw[g, a, b] == float(want)
        for r in rows:
            for a in range(k):
                assert dx[r, a] == float(sum(F(df[r, b]) * F(wf[g, a, b]) for b in range(n)))
    assert (dw[1] == 0).all() and (dx[9:] == 0).all()


def test_abs_product_bounds_the_true_product():
    qa, qb, gs = _problem(np.random.default_rng(12), m=16, gs=(8, 0, 8, 0))
    bound = abs_product(qa, qb, gs)
    a, b = np.abs(dequantize(qa, np.float64)), np.abs(dequantize(qb, np.float64))
    for i, j in [(0, 0), (3, 100), (15, 255), (9, 17)]:
        g = 0 if i < 8 else 2
        true = sum(F(a[i, t]) * F(b[g, t, j]) for t in range(512))
        assert F(bound[i, j]) >= true


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda qa, qb, gs: (qa, qb, np.array([5, -1, 3, 0])), "negative group size"),
        (lambda qa, qb, gs: (qa, qb, np.array([1, 2, 3])), "3 groups"),
        (lambda qa, qb, gs: (qa, qb, np.array([20, 0, 20, 0])), "exceeds M"),
        (lambda qa, qb, gs: (qa, qb, np.array([1.0, 2, 3, 4])), "integer"),
        (lambda qa, qb, gs: (qa, quantize(np.ones((4, 384, 256), np.float32), (128, 128)), gs),
         "K mismatch"),
        (lambda qa, qb, gs: (qa, qb.values, gs), "both be QTensors"),
        (lambda qa, qb, gs: (quantize(np.ones((24, 500), np.float32)),
                             quantize(np.ones((4, 500, 256), np.float32), (128, 128)), gs),
         "multiple of 128"),
        (lambda qa, qb, gs: (quantize(np.ones((24, 512), np.float32), (128, 128)), qb, gs),
         "blocks"),
    ],
)
def test_bad_input_raises_value_error(mutate, match):
    qa, qb, gs = _problem(np.random.default_rng(1))
    a, b, g = mutate(qa, qb, gs)
    with pytest.raises(ValueError, match=match):
        gmm(a, b, g)


def test_bad_dtypes_and_accum():
    qa, qb, gs = _problem(np.random.default_rng(1))
    with pytest.raises(ValueError, match="unknown accum"):
        gmm(qa, qb, gs, accum="fast")
    with pytest.raises(ValueError, match="out_dtype"):
        gmm(qa, qb, gs, out_dtype=np.float16)
    with pytest.raises(ValueError, match="only meaningful"):
        gmm(qa, qb, gs, out_dtype=np.float64)
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        gmm(np.ones((4, 128)), np.ones((1, 128, 128)), np.array([4]))
    with pytest.raises(ValueError, match="needs blockwise"):
        gmm(np.ones((4, 128), np.float32), np.ones((1, 128, 128), np.float32), np.array([4]),
            accum="deepgemm")


@pytest.mark.parametrize(("shape", "dtype"), [
    ((0, 5), np.float32), ((3,), ml_dtypes.bfloat16), ((1 << 19, 3), np.float64),
    ((4, 1 << 20), np.float32), ((7, 1 << 19), ml_dtypes.bfloat16)])
def test_zeroed_writes_every_byte(shape, dtype, monkeypatch):
    """The outputs' zeroing split among the threads (`gmm.zeroed`) covers every byte of
    memory that held garbage, at sizes below, at and past its split (4 MiB a thread), in
    byte counts that are no multiple of a page."""
    import importlib

    gmm_module = importlib.import_module("fp8check.references.gmm")
    monkeypatch.setattr(gmm_module, "np", _PoisonedEmpty())
    out = gmm_module.zeroed(shape, dtype)
    assert out.shape == shape and out.dtype == dtype and not out.view(np.uint8).any()
