"""The AMX int8 path of the e4m3 gmm reference (`fp8check.references.amx`): its digits,
its tile layout and its exactness (its bit-identity with the float64 BLAS path is in
test_partials_paths.py).

Where the CPU has AMX the path must be on (a build or start-up failure is a test failure,
not a silent fallback); where it has none the status says so."""

import os
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fp8check.references import amx
from tests.oracle import E4M3_CODES, e4m3_partials_rn32

CODES = np.array(E4M3_CODES, np.uint8)
E4M3 = ml_dtypes.float8_e4m3fn


def test_status_is_amx_where_the_cpu_has_it():
    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    if os.environ.get("FP8CHECK_AMX") == "0":  # the user's switch
        assert amx.STATUS == "off (FP8CHECK_AMX=0)" and not amx.AVAILABLE
    elif all(f in flags for f in ("amx_int8", "amx_tile", "avx512vbmi", "avx512bw")):
        # only Linux refusing the tile state (a sandbox) may turn it off: a failed build
        # or any other reason is a bug, not a fallback
        assert amx.STATUS in ("amx-int8", "off (Linux refused the AMX tile state)")
        assert amx.AVAILABLE == (amx.STATUS == "amx-int8")
    else:
        assert amx.STATUS.startswith("off (") and not amx.AVAILABLE


def test_digits_rebuild_every_code_exactly():
    v = CODES.view(E4M3).astype(np.float64)
    d = amx.DIGITS[CODES].astype(np.int64)
    assert np.abs(d).max() <= 127
    np.testing.assert_array_equal(d[:, 0] + d[:, 1] * 2**7 + d[:, 2] * 2**14, v * 2**9)
    # the sign of every nonzero digit is the value's: no carries between digits
    assert np.all(d * np.sign(v)[:, None] >= 0)


@pytest.mark.skipif(not amx.AVAILABLE, reason=f"no AMX path here: {amx.STATUS}")
def test_rhs_tiles_layout():
    rng = np.random.default_rng()
    k, n = 256, 384
    codes = rng.choice(CODES, (k, n))
    tiles = amx.rhs_tiles(codes)
    assert tiles.shape == (k // 128, 3, 2, n // 16, 16, 64)
    kb, d, kk, ct, k4, col, t = (rng.integers(0, s, 200) for s in (k // 128, 3, 2, n // 16,
                                                                     16, 16, 4))
    want = amx.DIGITS[codes[128 * kb + 64 * kk + 4 * k4 + t, 16 * ct + col], d]
    np.testing.assert_array_equal(tiles[kb, d, kk, ct, k4, 4 * col + t], want)


@pytest.mark.skipif(not amx.AVAILABLE, reason=f"no AMX path here: {amx.STATUS}")
def test_amx_partials_are_the_exact_integer_dot_products():
    """The kernel's partials of one K block against Python integers, rounded once to
    float32 by the rational oracle."""
    rng = np.random.default_rng()
    rows, n = 48, 256
    a = rng.choice(CODES, (rows, 128))
    b = rng.choice(CODES, (128, n))
    planes = np.ascontiguousarray(amx.DIGITS[a].transpose(2, 0, 1))  # [3, rows, 128]
    tiles = amx.rhs_tiles(b)[0]
    part = np.empty((rows, 128), np.float32)
    amx.block_partials(planes, 0, rows, tiles, 8, 8, part)  # columns 128..255
    np.testing.assert_array_equal(part, np.float32(e4m3_partials_rn32(a, b[:, 128:])))


@pytest.mark.skipif(not amx.AVAILABLE, reason=f"no AMX path here: {amx.STATUS}")
def test_lhs_planes_layout():
    rng = np.random.default_rng()
    rows, k, plane_rows = 37, 384, 48
    codes = rng.choice(CODES, (rows, k))
    planes = np.full((k // 128, 3, plane_rows, 128), 99, np.int8)
    amx.lhs_planes(codes, amx.TABLE, planes)
    want = amx.DIGITS[codes].reshape(rows, k // 128, 128, 3).transpose(1, 3, 0, 2)
    np.testing.assert_array_equal(planes[:, :, :rows], want)
    assert (planes[:, :, rows:] == 99).all()  # padding rows left alone
