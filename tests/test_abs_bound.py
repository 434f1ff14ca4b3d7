"""|A||B| of blockwise FP8 operands (`references.abs_bound`, behind `abs_product`): the
same bits on every partials path (AMX, VNNI, float64 BLAS) as its definition evaluated
from exact integer block sums, on adversarial operands; an upper bound of the true
product; NaN codes and non-finite scales reach the elements they touch."""

from fractions import Fraction as F

import ml_dtypes
import numpy as np
import pytest

from fp8check.references import abs_product, dequantize, quantize
from fp8check.references.abs_bound import factor
from tests.test_partials_paths import PATHS, _adversarial, _only

E4M3 = ml_dtypes.float8_e4m3fn


def _definition(lhs, rhs, gs) -> np.ndarray:
    """abs_bound's definition, from exact integer block sums of the magnitudes (e4m3fn:
    value * 2^9 is an integer) and float64 elementwise operations in K-block order."""
    m, k = lhs.values.shape
    n = rhs.values.shape[2]
    a = np.abs(lhs.values.astype(np.float64) * 512).astype(np.int64)
    b = np.abs(rhs.values.astype(np.float64) * 512).astype(np.int64)
    offs = np.concatenate([[0], np.cumsum(gs)])
    out = np.zeros((m, n))
    for g in range(len(gs)):
        rows = slice(offs[g], offs[g + 1])
        s = np.zeros((offs[g + 1] - offs[g], n))
        for kb in range(k // 128):
            blk = slice(128 * kb, 128 * (kb + 1))
            q = (a[rows, blk] @ b[g, blk]).astype(np.float64) * 2.0**-18  # exact: < 2^53
            sb = np.repeat(np.abs(rhs.scales[g, kb].astype(np.float64)), 128)[:n]
            s = s + q * (np.abs(lhs.scales[rows, kb].astype(np.float64))[:, None] * sb)
        out[rows] = s * factor(k)
    return out


@pytest.mark.parametrize("path", ["blas", *sorted(PATHS)])
@pytest.mark.parametrize("shape", [(300, 256, 128, 4), (45, 2048, 256, 3), (1, 128, 128, 1),
                                   (37, 384, 200, 3), (9, 128, 40, 2), (700, 256, 150, 2)])
def test_every_path_gives_the_definitions_bits(path, shape, monkeypatch):
    """Every e4m3 value (max 448, subnormals, -0), a column of +-448, all-zero K blocks
    of lhs rows and of an rhs column tile, scales over many binades, empty groups, rows
    past the last group, N not a multiple of 16 or 128, more rows than a chunk."""
    lhs, rhs, gs = _adversarial(np.random.default_rng(), *shape)
    lhs.values.view(np.uint8)[::5, :128] = 0x80  # -0: an all-zero block
    rhs.values.view(np.uint8)[0, -128:, :16] = 0
    with monkeypatch.context() as mp:
        _only(path, mp)
        got = abs_product(lhs, rhs, gs)
    np.testing.assert_array_equal(got.view(np.uint64), _definition(lhs, rhs, gs).view(np.uint64))
    assert not got[int(gs.sum()):].any() and np.isfinite(got).all()


@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2"])
def test_it_bounds_the_true_product(fmt):
    """Against the rational |A||B|, on rows and experts of magnitudes 2^-40 .. 2^40; the
    bound is tight (within 2 (K + 4) 2^-53 of the true value, relative)."""
    rng = np.random.default_rng()
    m, k, n, gs = 20, 384, 136, np.array([9, 0, 11], np.int32)
    x = rng.standard_normal((m, k)) * np.exp2(rng.integers(-40, 40, (m, 1)))
    w = rng.standard_normal((3, k, n)) * np.exp2(rng.integers(-40, 40, (3, 1, 1)))
    qa = quantize(x.astype(np.float32), (1, 128), fmt=fmt)
    qb = quantize(w.astype(np.float32), (128, 128), fmt=fmt)
    bound = abs_product(qa, qb, gs)
    a, b = np.abs(dequantize(qa, np.float64)), np.abs(dequantize(qb, np.float64))
    for i, j in [(0, 0), (3, 100), (19, 135), (9, 17), (12, 64)]:
        g = 0 if i < 9 else 2
        true = sum(F(a[i, t]) * F(b[g, t, j]) for t in range(k))
        assert true <= F(bound[i, j]) <= true * (1 + F(2 * (k + 4), 2**53))


@pytest.mark.parametrize("path", ["blas", *sorted(PATHS)])
@pytest.mark.parametrize("fault", ["lhs NaN code", "rhs NaN code", "inf scale"])
def test_non_finite_inputs_reach_what_they_touch(path, fault, monkeypatch):
    """A NaN code of lhs makes its row NaN, one of rhs its expert's column NaN, an
    infinite lhs scale its row Inf (or NaN where a block sums to 0); every other element
    keeps the definition's bits."""
    lhs, rhs, gs = _adversarial(np.random.default_rng(), 45, 256, 130, 3)  # groups 1, 2 empty
    clean = _definition(lhs, rhs, gs)
    if fault == "lhs NaN code":
        lhs.values.view(np.uint8)[4, 9] = 0xFF
        hit = (slice(4, 5), slice(None))
    elif fault == "rhs NaN code":
        rhs.values.view(np.uint8)[0, 7, 3] = 0x7F
        hit = (slice(0, int(gs[0])), slice(3, 4))
    else:
        lhs.scales[6, 1] = np.inf
        hit = (slice(6, 7), slice(None))
    with monkeypatch.context() as mp:
        _only(path, mp)
        got = abs_product(lhs, rhs, gs)
    assert not np.isfinite(got[hit]).any()
    if fault != "inf scale":
        assert np.isnan(got[hit]).all()
    keep = np.ones(got.shape, bool)
    keep[hit] = False
    np.testing.assert_array_equal(got[keep].view(np.uint64), clean[keep].view(np.uint64))
