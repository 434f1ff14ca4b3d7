"""The fast conversions of `fp8check.references.casts`: widening exact on every code of
every narrow format, narrowing to bf16 correctly rounded where rounding through float32
first would go wrong (float32 ties on bf16 midpoints), at the subnormal and overflow
edges, against exact rationals and against ml_dtypes' own (slow) float64 cast."""

from fractions import Fraction as F

import ml_dtypes
import numpy as np
import pytest

from fp8check.references.casts import BF16, rounded, to_float64
from tests.oracle import round_fraction


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    g, w = got.view(np.uint16), want.view(np.uint16)
    nan = np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32))
    bad = np.flatnonzero((g != w) & ~nan)
    assert not bad.size, f"{bad.size} differ, first at {bad[0]}: {got[bad[0]]} vs {want[bad[0]]}"


def _bf16_midpoints(rng: np.random.Generator, n: int) -> np.ndarray:
    """Float64 values exactly between two neighbouring finite bf16 values (random codes,
    subnormals and the largest binade included)."""
    codes = rng.integers(0, 0x7F7F, n, dtype=np.uint16)  # finite, below the largest
    lo = codes.view(BF16).astype(np.float32).astype(np.float64)
    hi = (codes + 1).view(BF16).astype(np.float32).astype(np.float64)
    mid = (lo + hi) / 2  # exact: a bf16 midpoint has at most 9 significant bits
    return mid * rng.choice([-1.0, 1.0], n)


def _adversarial(rng: np.random.Generator) -> np.ndarray:
    """Midpoints, and values a float32 rounding moves onto them (offsets of 2^-25 .. 2^-52
    relative: below float32's half ulp), or just off them; the overflow threshold and
    float32's edges; zeros, infinities, NaN; the smallest subnormals' midpoints."""
    mid = _bf16_midpoints(rng, 20000)
    parts = [mid, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf)]
    for e in (25, 26, 30, 40, 52):
        parts += [mid * (1 + 2.0**-e), mid * (1 - 2.0**-e)]
    over = 2.0**128 * (1 - 2.0**-9)  # bf16's overflow midpoint (largest finite + half ulp)
    f32max = float(np.finfo(np.float32).max)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, over, over * (1 + 2.0**-40),
               over * (1 - 2.0**-40), f32max, f32max * (1 + 2.0**-30), 1e300, -1e300,
               2.0**-133, 2.0**-134, 2.0**-134 * (1 + 2.0**-40), 2.0**-135, 2.0**-150, 1e-300]
    x = np.concatenate(parts + [np.array(special), -np.array(special)])
    return x


def test_rounded_to_bf16_matches_ml_dtypes_on_ties_edges_and_wide_random_data():
    rng = np.random.default_rng(0)
    wide = rng.standard_normal(200000) * np.exp2(rng.integers(-150, 130, 200000))
    for x in (_adversarial(rng), wide):
        with np.errstate(over="ignore"):
            _same_bits(rounded(x, BF16), x.astype(BF16))


def test_rounded_to_bf16_matches_rationals_where_float32_first_would_not():
    """The values where float32-then-bf16 double-rounds: the float32 rounding lands on a
    bf16 midpoint and the tie then goes to even, against the side x is on."""
    rng = np.random.default_rng(1)
    mid = _bf16_midpoints(rng, 3000)
    x = np.concatenate([mid * (1 + 2.0**-30), mid * (1 - 2.0**-30)])
    twice = x.astype(np.float32).astype(BF16).astype(np.float32)
    got = rounded(x, BF16).astype(np.float32)
    want = np.array([round_fraction(F(float(v)), "bf16") for v in x], np.float32)
    np.testing.assert_array_equal(got, want)
    assert np.count_nonzero(twice != want) > 1000  # the data does hit the double rounding


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rounded_to_other_formats_is_numpys_cast(dtype):
    x = np.random.default_rng(2).standard_normal((7, 5)) * 1e-40
    got = rounded(x, dtype)
    assert got.dtype == dtype and got.shape == x.shape
    np.testing.assert_array_equal(got, x.astype(dtype))


@pytest.mark.parametrize("dtype", [BF16, np.float16, ml_dtypes.float8_e4m3fn,
                                   ml_dtypes.float8_e5m2], ids=str)
def test_to_float64_is_exact_on_every_code(dtype):
    bits = np.uint16 if np.dtype(dtype).itemsize == 2 else np.uint8
    codes = np.arange(np.iinfo(bits).max + 1, dtype=np.int64).astype(bits).view(dtype)
    got = to_float64(codes.reshape(-1, 16))
    assert got.dtype == np.float64 and got.shape == (codes.size // 16, 16)
    with np.errstate(invalid="ignore"):  # ml_dtypes warns on NaN codes
        want = codes.astype(np.float64)  # its direct conversion, not through float32
    np.testing.assert_array_equal(got.ravel(), want)  # NaN codes compare equal here


@pytest.mark.parametrize("dtype", [BF16, np.float32], ids=["bf16", "f32"])
def test_rounded_into_out_in_any_layout(dtype):
    """`out=`: written in place, C-ordered or a strided view alike, the same bits as a new
    array; a wrong shape or dtype is a ValueError."""
    x = np.random.default_rng(3).standard_normal((6, 10)) * np.exp2(np.arange(10) * 14 - 70)
    want = rounded(x, dtype)
    for out in (np.empty((6, 10), dtype), np.empty((10, 6), dtype).T):
        assert rounded(x, dtype, out=out) is out
        np.testing.assert_array_equal(out.astype(np.float32).view(np.uint32),
                                      want.astype(np.float32).view(np.uint32))
    with pytest.raises(ValueError, match="out must be"):
        rounded(x, dtype, out=np.empty((6, 9), dtype))
