"""The AMX int8 path of the e4m3 gmm reference (`fp8check.references.amx`): its status,
digits and tile layout (its exact partials and row split: test_digit_paths.py; its
bit-identity with the float64 BLAS path: test_partials_paths.py).

Where the CPU has AMX the path must be on (a build or start-up failure is a test failure,
not a silent fallback); where it has none the status says so."""

import os
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fp8check.references import amx
from tests.oracle import E4M3_CODES

CODES = np.array(E4M3_CODES, np.uint8)
E4M3 = ml_dtypes.float8_e4m3fn


def test_status_is_amx_where_the_cpu_has_it():
    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    if os.environ.get("FP8CHECK_AMX") == "0":  # the user's switch
        assert amx.STATUS == "off (FP8CHECK_AMX=0)" and not amx.AVAILABLE
    elif all(f in flags for f in amx.NEEDS):
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
@pytest.mark.parametrize("n", [384, 200])
def test_rhs_tiles_layout(n):
    rng = np.random.default_rng()
    k = 256
    codes = rng.choice(CODES, (k, n))
    tiles = amx.PATH.pack_rhs(codes)
    nt = -(-n // 16)
    assert tiles.shape == (k // 128, 3, 2, nt, 16, 64)
    padded = np.zeros((k, 16 * nt), np.uint8)  # zero digits past N
    padded[:, :n] = codes
    kb, d, kk, ct, k4, col, t = np.meshgrid(*(np.arange(s) for s in (k // 128, 3, 2, nt, 16,
                                                                     16, 4)), indexing="ij")
    want = amx.DIGITS[padded[128 * kb + 64 * kk + 4 * k4 + t, 16 * ct + col], d]
    np.testing.assert_array_equal(tiles[kb, d, kk, ct, k4, 4 * col + t], want)
