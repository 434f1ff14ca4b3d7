"""The exact arithmetic kernels against exact rationals."""

from fractions import Fraction

import numpy as np
import pytest

from fp8check.references.exact import exact_sum, fma_f32
from tests.oracle import fma_f32 as fma_oracle
from tests.oracle import round_fraction


def _midpoint_triples(rng, n):
    """a*b exactly halfway between two float32 values, c a tiny nudge either way: the case a
    float64 product-then-add rounds twice and gets wrong."""
    b = (1 + rng.integers(0, 2**23, n) * 2.0**-23).astype(np.float32)
    b = (b.view(np.uint32) | 1).view(np.float32)  # 24 significant bits
    a = (3 * 2.0 ** rng.integers(-20, 20, n)).astype(np.float32)
    p = a.astype(np.float64) * b.astype(np.float64)
    r = p.astype(np.float32).astype(np.float64)
    mid = np.abs(p - r) == np.abs(np.spacing(r.astype(np.float32)).astype(np.float64)) / 2
    sign = rng.choice([-1.0, 1.0], n)
    c = (sign * p * 2.0**-60).astype(np.float32)  # below half a float64 ulp of p
    return a[mid], b[mid], c[mid]


def _random_triples(rng, n):
    e = rng.integers(-30, 30, (3, n))
    a, b, c = (rng.standard_normal((3, n)) * 2.0**e).astype(np.float32)
    cancel = rng.random(n) < 0.3  # c close to -a*b: massive cancellation
    c = np.where(cancel, (-(a.astype(np.float64) * b)).astype(np.float32), c)
    return a, b, c


def test_fma_f32_matches_exact_rationals_on_a_million_triples():
    rng = np.random.default_rng(1234)
    a, b, c = _random_triples(rng, 1_000_000)
    ma, mb, mc = _midpoint_triples(rng, 200_000)
    assert ma.size > 50_000  # the hard family is really there
    a, b, c = (np.concatenate(v) for v in ((a, ma), (b, mb), (c, mc)))
    got = fma_f32(a, b, c)
    want = np.array([fma_oracle(x, y, z) for x, y, z in zip(a.tolist(), b.tolist(),
                                                           c.tolist(), strict=True)])
    bad = np.flatnonzero(got.astype(np.float64) != want)
    assert bad.size == 0, f"{bad.size} wrong, first at {a[bad[0]]!r},{b[bad[0]]!r},{c[bad[0]]!r}"
    # And a naive float64 product-then-add really fails on the midpoint family.
    naive = (ma.astype(np.float64) * mb + mc).astype(np.float32)
    assert (naive != fma_f32(ma, mb, mc)).any()


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
def test_fma_f32_special_values():
    inf, nan = np.float32(np.inf), np.float32(np.nan)
    one = np.float32(1)
    assert np.isnan(fma_f32(inf, np.float32(0), one))
    assert fma_f32(inf, one, one) == inf
    assert np.isnan(fma_f32(nan, one, one))
    big = np.float32(2.0**127)
    assert fma_f32(big, np.float32(4), np.float32(0)) == inf  # overflow rounds to inf


def test_fma_f32_rejects_float64():
    with pytest.raises(ValueError, match="float64"):
        fma_f32(np.float64(1), np.float32(1), np.float32(1))


@pytest.mark.parametrize("fmt,dtype", [("f64", np.float64), ("f32", np.float32)])
def test_exact_sum_is_correctly_rounded(fmt, dtype):
    rng = np.random.default_rng(7)
    n, t = 3000, 17
    terms = rng.standard_normal((n, t)) * 2.0 ** rng.integers(-60, 60, (n, t))
    # Rows that cancel to a tiny remainder, and rows that land on exact ties.
    terms[::3, 1] = -terms[::3, 0]
    terms[1::5] = 0.0
    terms[1::5, 0] = 1.0
    terms[1::5, 1] = 2.0**-24 if fmt == "f32" else 2.0**-53  # exactly half an ulp of 1
    terms[2::5, 2] = 2.0**-200  # a sticky bit far below everything
    got = exact_sum(terms, dtype)
    want = [round_fraction(sum(map(Fraction, row)), fmt) for row in terms.tolist()]
    assert got.tolist() == want


def test_exact_sum_subnormal_results():
    terms = np.array([[2.0**-149, 2.0**-151], [2.0**-150, 0.0], [3 * 2.0**-150, 0.0]])
    got = exact_sum(terms, np.float32).tolist()
    assert got == [round_fraction(sum(map(Fraction, r)), "f32") for r in terms.tolist()]
    assert got[1] == 0.0  # exactly half the smallest subnormal rounds to even (zero)
