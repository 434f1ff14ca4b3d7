"""The AVX512-VNNI path of the e4m3 gmm reference (`fp8check.references.vnni`): its status
and its digit layout (its exact partials and row split: test_digit_paths.py; its
bit-identity with the float64 BLAS path: test_partials_paths.py).

Where the CPU has AVX512-VNNI the path must be on (a build failure is a test failure, not
a silent fallback); where it has none the status says so."""

import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from fp8check.references import cbuild, vnni
from tests.oracle import E4M3_CODES

CODES = np.array(E4M3_CODES, np.uint8)
E4M3 = ml_dtypes.float8_e4m3fn
needs_vnni = pytest.mark.skipif(not vnni.AVAILABLE, reason=f"no VNNI path here: {vnni.STATUS}")


def test_status_is_vnni_where_the_cpu_has_it():
    if os.environ.get("FP8CHECK_VNNI") == "0":  # the user's switch
        assert vnni.STATUS == "off (FP8CHECK_VNNI=0)" and not vnni.AVAILABLE
    elif set(vnni.NEEDS) <= cbuild.cpu_flags():
        assert vnni.STATUS == "avx512-vnni" and vnni.AVAILABLE
    else:
        assert vnni.STATUS.startswith("off (no ") and not vnni.AVAILABLE


def test_switch_turns_the_path_off():
    code = ("from fp8check.references import vnni; from fp8check.references.gmm import "
            "PARTIALS; print(vnni.STATUS); print(PARTIALS)")
    env = dict(os.environ, FP8CHECK_VNNI="0", FP8CHECK_AMX="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out == ["off (FP8CHECK_VNNI=0)",
                   "float64 BLAS (AMX off (FP8CHECK_AMX=0), VNNI off (FP8CHECK_VNNI=0))"]


def _digits(codes: np.ndarray) -> np.ndarray:
    """[..., 3] int64: h, l, h + l of X = value * 2^9 = 2^9 h + l, sign and magnitude."""
    x = (codes.view(E4M3).astype(np.float64) * 512).astype(np.int64)
    s, a = np.sign(x), np.abs(x)
    return np.stack([s * (a >> 9), s * (a & 511), s * ((a >> 9) + (a & 511))], axis=-1)


def test_digits_rebuild_every_code_exactly():
    d = _digits(CODES)
    np.testing.assert_array_equal(d[:, 0] * 512 + d[:, 1],
                                  CODES.view(E4M3).astype(np.float64) * 512)
    assert np.abs(d).max() <= 480  # |h| <= 448, |l| <= 480: far inside int16


@needs_vnni
@pytest.mark.parametrize("n", [256, 200, 7])
def test_pack_rhs_layout(n):
    rng = np.random.default_rng()
    k = 256
    codes = rng.choice(CODES, (k, n))
    packed = vnni.PATH.pack_rhs(codes)
    nv = -(-n // 16)
    assert packed.shape == (k // 128, nv, 64, 3, 16, 2)
    padded = np.zeros((k, 16 * nv), np.uint8)
    padded[:, :n] = codes
    want = _digits(padded).reshape(k // 128, 64, 2, nv, 16, 3).transpose(0, 3, 1, 5, 4, 2)
    np.testing.assert_array_equal(packed, want)
