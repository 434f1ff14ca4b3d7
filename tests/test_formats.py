"""Format facts, satfinite, ULP, and the measured overflow table in the docs."""

import math
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fp8check.formats import get_format, satfinite, ulp
from fp8check.measures import overflow

DOC = Path(__file__).resolve().parents[1] / "docs" / "fp8-overflow.md"


def test_e4m3fn_and_e5m2_facts():
    e4, e5 = get_format("e4m3fn"), get_format("e5m2")
    assert (e4.max, e4.mantissa_bits, e4.has_inf) == (448.0, 3, False)
    assert (e5.max, e5.mantissa_bits, e5.has_inf) == (57344.0, 2, True)
    assert e4.smallest_subnormal == 2.0**-9 and e5.smallest_subnormal == 2.0**-16
    assert get_format("bf16").u == 2.0**-8 and get_format(np.float32).u == 2.0**-24
    # e4m3fn NaN codes are 0x7F and 0xFF and nothing else.
    codes = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    assert sorted(np.flatnonzero(np.isnan(codes)).tolist()) == [0x7F, 0xFF]


def test_get_format_rejects_unknown():
    with pytest.raises(ValueError, match="unknown format"):
        get_format("e3m4")
    with pytest.raises(ValueError, match="unsupported dtype"):
        get_format(np.int8)


def test_satfinite_rounds_then_saturates():
    x = np.array([463.9, 464.0, 465.0, 1e30, np.inf, -np.inf, -500.0, 1.0625, np.nan],
                 np.float32)
    got = satfinite(x, "e4m3fn").astype(np.float32)
    np.testing.assert_array_equal(got[:8], [448, 448, 448, 448, 448, -448, -448, 1.0])
    assert np.isnan(got[8])
    # RNE on ties: 1.0625 is halfway between 1.0 and 1.125 -> even (1.0); 1.1875 -> 1.25.
    assert satfinite(np.float32(1.1875)).astype(np.float32) == 1.25
    e5 = satfinite(np.array([61440.0, 1e9], np.float32), "e5m2").astype(np.float32)
    np.testing.assert_array_equal(e5, [57344.0, 57344.0])
    with pytest.raises(ValueError, match="float64"):
        satfinite(np.float64(1.0))


def test_ulp_matches_neighbour_gaps_for_every_code():
    for fmt in ("e4m3fn", "e5m2"):
        f = get_format(fmt)
        v = np.arange(256, dtype=np.uint8).view(f.dtype).astype(np.float64)
        pos = np.unique(v[np.isfinite(v) & (v >= 0)])
        # spacing above each non-negative finite value but the max
        np.testing.assert_array_equal(ulp(pos[:-1], fmt), np.diff(pos))
    x = np.array([1.0, 1.5, 2.0**-126, 2.0**-140, 3.0e38], np.float32)
    np.testing.assert_array_equal(ulp(x, "f32"), np.spacing(x).astype(np.float64))
    assert ulp(np.float32(1.0), "bf16") == 2.0**-7
    assert np.isnan(ulp(np.inf, "f32"))


def test_ulp_is_exact_across_the_whole_float64_range():
    # Every power of two float64 holds (subnormal ones included), one value inside each
    # binade and negative values, against Python's math.ulp (the spacing above |x|).
    k = np.arange(-1074, 1024)
    x = np.concatenate([np.ldexp(1.0, k), np.ldexp(1.75, k[:-1]), -np.ldexp(1.25, k[:-1])])
    np.testing.assert_array_equal(ulp(x, "f64"), [math.ulp(v) for v in x])
    np.testing.assert_array_equal(ulp(x.reshape(2, -1), "f64").ravel(), ulp(x, "f64"))
    assert np.isnan(ulp(np.array([np.nan, -np.inf]), "f64")).all()
    # a format's subnormal spacing below its smallest normal, float64 subnormals included
    assert ulp(np.float64(2.0**-1070), "f32") == 2.0**-149
    assert ulp(0.0, "e4m3fn") == 2.0**-9


def _doc_table() -> dict[str, list[str]]:
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"\| (.+?) \| (.+) \|$", line)
        if m and m.group(1) in overflow.STACKS:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


def test_documented_overflow_table_is_what_this_machine_does():
    measured = overflow.measure()
    assert _doc_table() == measured, (
        "docs/fp8-overflow.md disagrees with this machine; regenerate it with "
        "`python -m fp8check.measures.overflow`"
    )
    # The two casts disagree on overflow: ml_dtypes gives NaN, torch saturates to 448.
    assert measured["numpy/ml_dtypes astype"][2] == "nan"
    assert measured["torch eager .to()"][2] == "448.0"
