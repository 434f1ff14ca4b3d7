"""The AMX int8 path of the e4m3 gmm reference (`fp8check.references.amx`): its digits,
its tile layout, its exactness and its bit-identity with the float64 BLAS path.

Where the CPU has AMX the path must be on (a build or start-up failure is a test failure,
not a silent fallback); where it has none the status says so and the BLAS path, tested
by every other reference test, is the only one."""

import os
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fp8check.references import QTensor, amx, gmm, quantize
from tests.oracle import rn32

CODES = np.array([c for c in range(256) if c & 0x7F != 0x7F], np.uint8)  # every non-NaN
E4M3 = ml_dtypes.float8_e4m3fn


def test_status_is_amx_where_the_cpu_has_it():
    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    if os.environ.get("FP8CHECK_AMX") == "0":  # the user's switch
        assert amx.STATUS == "float64 BLAS (FP8CHECK_AMX=0)" and not amx.AVAILABLE
    elif all(f in flags for f in ("amx_int8", "amx_tile", "avx512vbmi", "avx512bw")):
        # only Linux refusing the tile state (a sandbox) may turn it off: a failed build
        # or any other reason is a bug, not a fallback
        assert amx.STATUS in ("amx-int8", "float64 BLAS (the kernel refused AMX tile state)")
        assert amx.AVAILABLE == (amx.STATUS == "amx-int8")
    else:
        assert amx.STATUS.startswith("float64 BLAS (") and not amx.AVAILABLE


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


def test_nan_codes_are_found():
    codes = np.zeros((3, 5), np.uint8)
    assert not amx.has_nan_code(codes)
    for nan in (0x7F, 0xFF):
        codes[2, 4] = nan
        assert amx.has_nan_code(codes)


def _adversarial(rng, m, k, n, g):
    """QTensors whose codes cover every non-NaN e4m3 value (max 448, subnormals, -0) and
    a column of +-448, random float32 scales over many binades, and group sizes with an
    empty middle and last group (g >= 3) and rows past the last group."""
    a = rng.choice(CODES, (m, k))
    a.flat[:min(a.size, CODES.size)] = CODES[:a.size]  # each code at least once
    b = rng.choice(CODES, (g, k, n))
    b[0, :, 0] = (b[0, :, 0] & 0x80) | 0x7E  # +-448
    sa = rng.uniform(0.5, 1, (m, k // 128)) * np.exp2(rng.integers(-20, 10, (m, k // 128)))
    sb = rng.uniform(0.5, 1, (g, k // 128, n // 128)) * np.exp2(
        rng.integers(-20, 10, (g, k // 128, n // 128)))
    gs = rng.multinomial(m - min(m - 1, 3), np.full(g, 1 / g)).astype(np.int32)
    if g >= 3:
        gs[0] += gs[1] + gs[-1]
        gs[1] = gs[-1] = 0
    return (QTensor(a.view(E4M3), sa.astype(np.float32), (1, 128), "e4m3fn", "deepgemm"),
            QTensor(b.view(E4M3), sb.astype(np.float32), (128, 128), "e4m3fn", "deepgemm"),
            gs)


@pytest.mark.skipif(not amx.AVAILABLE, reason=f"no AMX path here: {amx.STATUS}")
@pytest.mark.parametrize("accum", ["deepgemm", "cublas", "tokamax"])
@pytest.mark.parametrize("shape", [(300, 256, 128, 4), (45, 2048, 256, 3), (1, 128, 128, 1)])
def test_amx_and_blas_paths_give_the_same_bits(accum, shape, monkeypatch):
    lhs, rhs, gs = _adversarial(np.random.default_rng(), *shape)
    out_amx = gmm(lhs, rhs, gs, accum=accum)
    monkeypatch.setattr(amx, "AVAILABLE", False)
    out_blas = gmm(lhs, rhs, gs, accum=accum)
    np.testing.assert_array_equal(out_amx.view(np.uint32), out_blas.view(np.uint32))
    assert np.isfinite(out_amx).all() and np.any(out_amx)


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
    ia = (a.view(E4M3).astype(np.float64) * 512).astype(np.int64)
    ib = (b.view(E4M3).astype(np.float64) * 512).astype(np.int64)
    exact = ia.astype(object) @ ib[:, 128:].astype(object)  # Python integers
    rounded = np.vectorize(lambda v: float(rn32(Fraction(v, 2**18))))(exact)
    np.testing.assert_array_equal(part, rounded.astype(np.float32))


def test_nan_input_takes_the_blas_path_and_propagates():
    rng = np.random.default_rng()
    x = rng.standard_normal((40, 256), dtype=np.float32)
    x[3, 7] = np.nan
    lhs = quantize(x, nan="propagate")
    rhs = quantize(rng.standard_normal((2, 256, 128), dtype=np.float32), (128, 128))
    out = gmm(lhs, rhs, np.array([20, 20], np.int32))
    assert np.isnan(out[3]).all() and np.isfinite(np.delete(out, 3, axis=0)).all()


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
