"""The fast exact paths of the e4m3 gmm reference (AMX int8 tiles, AVX512-VNNI int16 dot
products) give the float64 BLAS path's bits on adversarial operands, for every recipe;
operands with NaN codes take the BLAS path.  A path this CPU lacks is skipped, saying so
(`test_amx.py` and `test_vnni.py` require each path wherever the CPU has it)."""

import importlib

import ml_dtypes
import numpy as np
import pytest

from fp8check.references import QTensor, amx, gmm, mma, quantize, vnni
from fp8check.references.gmm import has_nan_code
from tests import amx_emulation
from tests.oracle import E4M3_CODES

CODES = np.array(E4M3_CODES, np.uint8)
E4M3 = ml_dtypes.float8_e4m3fn
_MODULES = {"amx": amx, "vnni": vnni}
PATHS = {**_MODULES, "amx-emulated": amx}
"""Each fast path by name, its module: "amx-emulated" is the AMX path's code on software
tiles (tests/amx_emulation.py), run where the CPU has no AMX too."""


def _adversarial(rng, m, k, n, g):
    """QTensors whose codes cover every non-NaN e4m3 value (max 448, subnormals, -0), a
    column of +-448 and a row and column of the code with the largest digit sum (the
    int32 bounds of the digit splits), a row of 448 against columns of 448 and of -448
    where group 0 has a row to spare (the int32 bound of the VNNI recipes' windowed
    digit: every product at its largest, one sign), random float32 scales over many
    binades, and group sizes with an empty middle and last group (g >= 3) and rows past
    the last group."""
    a = rng.choice(CODES, (m, k))
    a.flat[:min(a.size, CODES.size)] = CODES[:a.size]  # each code at least once
    b = rng.choice(CODES, (g, k, n))
    b[0, :, 0] = (b[0, :, 0] & 0x80) | 0x7E  # +-448
    a[-1, :] = b[-1, :, -1] = 0x37  # 0.9375: the largest low digit (480) and digit sum
    nb = -(-n // 128)
    sa = rng.uniform(0.5, 1, (m, k // 128)) * np.exp2(rng.integers(-20, 10, (m, k // 128)))
    sb = rng.uniform(0.5, 1, (g, k // 128, nb)) * np.exp2(rng.integers(-20, 10, (g, k // 128,
                                                                                 nb)))
    gs = rng.multinomial(m - min(m - 1, 3), np.full(g, 1 / g)).astype(np.int32)
    if g >= 3:
        gs[0] += gs[1] + gs[-1]
        gs[1] = gs[-1] = 0
    if gs[0] > -(-CODES.size // k):  # a row of group 0 past those holding every code
        a[gs[0] - 1, :] = 0x7E
        b[0, :, 1], b[0, :, 2] = 0x7E, 0xFE
    return (QTensor(a.view(E4M3), sa.astype(np.float32), (1, 128), "e4m3fn", "deepgemm"),
            QTensor(b.view(E4M3), sb.astype(np.float32), (128, 128), "e4m3fn", "deepgemm"),
            gs)


def _only(path: str, monkeypatch) -> None:
    """Let the gmm reference take `path` ("blas" or a fast path of PATHS), or skip if it
    can't."""
    if path == "amx-emulated":
        emulated = amx_emulation.gmm_path()
        if isinstance(emulated, str):
            pytest.skip(f"no software AMX tiles here: {emulated}")
        monkeypatch.setattr(amx, "PATH", emulated)
        monkeypatch.setattr(amx, "AVAILABLE", True)
        monkeypatch.setattr(vnni, "AVAILABLE", False)
        return
    for name, module in _MODULES.items():
        if name == path and not module.AVAILABLE:
            pytest.skip(f"no {name} path here: {module.STATUS}")
        if name != path:
            monkeypatch.setattr(module, "AVAILABLE", False)


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("accum", ["deepgemm", "cublas", "tokamax", "exact"])
@pytest.mark.parametrize("shape", [(300, 256, 128, 4), (45, 2048, 256, 3), (1, 128, 128, 1),
                                   (37, 384, 200, 3), (9, 128, 40, 2), (700, 256, 150, 2)])
def test_fast_paths_give_the_blas_bits(path, accum, shape, monkeypatch):
    """Rows not a multiple of 8 or 16, N not a multiple of 16 or 128, a group of more
    rows than the AMX path packs at once (256)."""
    lhs, rhs, gs = _adversarial(np.random.default_rng(), *shape)
    with monkeypatch.context() as mp:
        _only(path, mp)
        fast = gmm(lhs, rhs, gs, accum=accum)
    with monkeypatch.context() as mp:
        _only("blas", mp)
        blas = gmm(lhs, rhs, gs, accum=accum)
    np.testing.assert_array_equal(fast.view(np.uint32), blas.view(np.uint32))
    assert np.isfinite(fast).all() and np.any(fast)
    if accum == "exact":  # the true value: float64 output too, through the path's partials
        with monkeypatch.context() as mp:
            _only(path, mp)
            calls = []
            real = PATHS[path].PATH.exact_partials
            mp.setattr(PATHS[path].PATH, "exact_partials",
                       lambda *a, **k: calls.append(1) or real(*a, **k))
            fast = gmm(lhs, rhs, gs, out_dtype=np.float64, accum=accum)
            assert calls
        with monkeypatch.context() as mp:
            _only("blas", mp)
            blas = gmm(lhs, rhs, gs, out_dtype=np.float64, accum=accum)
        np.testing.assert_array_equal(fast.view(np.uint64), blas.view(np.uint64))


def test_nan_codes_are_found():
    codes = np.zeros((3, 5), np.uint8)
    assert not has_nan_code(codes)
    for nan in (0x7F, 0xFF):
        codes[2, 4] = nan
        assert has_nan_code(codes)


def test_nan_input_takes_the_blas_path_and_propagates():
    rng = np.random.default_rng()
    x = rng.standard_normal((40, 256), dtype=np.float32)
    x[3, 7] = np.nan
    lhs = quantize(x, nan="propagate")
    rhs = quantize(rng.standard_normal((2, 256, 128), dtype=np.float32), (128, 128))
    out = gmm(lhs, rhs, np.array([20, 20], np.int32))
    assert np.isnan(out[3]).all() and np.isfinite(np.delete(out, 3, axis=0)).all()


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("where", ["lhs", "rhs", "rhs of an empty group"])
def test_nan_codes_give_the_blas_bits(path, where, monkeypatch):
    """A NaN code that a fast path reads sends the whole gmm to the BLAS path (the digits
    cannot carry it; the kernel finds it while packing); one in an empty group's rhs,
    which no output reads, does not matter."""
    lhs, rhs, gs = _adversarial(np.random.default_rng(), 45, 256, 130, 3)  # groups 1, 2 empty
    codes = {"lhs": (lhs.values, (4, 9)), "rhs": (rhs.values, (0, 7, 3)),
             "rhs of an empty group": (rhs.values, (1, 7, 3))}[where]
    codes[0].view(np.uint8)[codes[1]] = 0xFF
    with monkeypatch.context() as mp:
        _only(path, mp)
        fast = gmm(lhs, rhs, gs)
    with monkeypatch.context() as mp:
        _only("blas", mp)
        blas = gmm(lhs, rhs, gs)
    np.testing.assert_array_equal(fast.view(np.uint32), blas.view(np.uint32))
    assert np.isnan(fast).any() == (where != "rhs of an empty group")


@pytest.mark.parametrize("path", ["blas", *sorted(PATHS)])
@pytest.mark.parametrize("accum", ["deepgemm", "cublas", "tokamax"])
@pytest.mark.parametrize("out_dtype", [np.float32, ml_dtypes.bfloat16])
def test_gmm_and_exact_gives_both_gmm_results(path, accum, out_dtype, monkeypatch):
    """One pass over the exact partials gives gmm's recipe and exact results bit for bit,
    on every partials path, and the recipe really came from that pass (no recipe gmm)."""
    from fp8check.references import gmm_and_exact

    lhs, rhs, gs = _adversarial(np.random.default_rng(), 45, 384, 200, 3)
    with monkeypatch.context() as mp:
        _only(path, mp)
        want = (gmm(lhs, rhs, gs, out_dtype, accum), gmm(lhs, rhs, gs, np.float64, "exact"))
        _forbid_gmm(mp)
        got = gmm_and_exact(lhs, rhs, gs, out_dtype, accum)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(_bits(g), _bits(w))


def _forbid_gmm(mp: pytest.MonkeyPatch) -> None:
    """Fail the test if gmm's blockwise path runs (gmm_and_exact must not call gmm)."""
    mp.setattr(importlib.import_module("fp8check.references.gmm"), "_gmm_blockwise",
               lambda *a, **k: pytest.fail("gmm_and_exact called gmm"))


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


@pytest.mark.parametrize("fault", ["nan-code", "inf-scale", "hopper"])
def test_gmm_and_exact_falls_back_to_gmm(fault):
    """Where the partials are not shared (NaN codes, a non-finite scale, the Hopper
    recipe's own partials), gmm_and_exact gives gmm's two results, NaN and Inf included."""
    from fp8check.references import gmm_and_exact

    lhs, rhs, gs = _adversarial(np.random.default_rng(), 37, 256, 130, 3)
    accum = "deepgemm-hopper" if fault == "hopper" else "deepgemm"
    if fault == "nan-code":
        lhs.values.view(np.uint8)[2, 5] = 0x7F
    if fault == "inf-scale":
        rhs.scales[0, 1, 0] = np.inf
    got = gmm_and_exact(lhs, rhs, gs, np.float32, accum)
    want = (gmm(lhs, rhs, gs, np.float32, accum), gmm(lhs, rhs, gs, np.float64, "exact"))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(_bits(g), _bits(w))
    assert fault == "hopper" or not np.isfinite(got[1]).all()


@pytest.mark.parametrize("accum", ["deepgemm", "cublas", "tokamax"])
def test_gmm_and_exact_on_e5m2(accum, monkeypatch):
    """e5m2 partials need two float64 words (superaccumulator pairs): the shared pass
    gives gmm's bits there too, with an empty group and rows past the last."""
    from fp8check.references import gmm_and_exact

    rng = np.random.default_rng()
    x = (rng.standard_normal((70, 256)) * np.exp2(rng.integers(-12, 12, (70, 1))))
    lhs = quantize(x.astype(np.float32), (1, 128), fmt="e5m2")
    rhs = quantize(rng.standard_normal((3, 256, 144)).astype(np.float32), (128, 128),
                   fmt="e5m2")
    gs = np.array([30, 0, 37], np.int32)
    want = (gmm(lhs, rhs, gs, ml_dtypes.bfloat16, accum), gmm(lhs, rhs, gs, np.float64, "exact"))
    _forbid_gmm(monkeypatch)
    got = gmm_and_exact(lhs, rhs, gs, ml_dtypes.bfloat16, accum)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(_bits(g), _bits(w))
    assert not got[0][67:].any() and np.any(got[0])


@pytest.mark.parametrize("out_dtype", [np.float32, ml_dtypes.bfloat16])
@pytest.mark.parametrize("fmt, data", [("e4m3fn", "adversarial"), ("e4m3fn", "quantized"),
                                       ("e5m2", "quantized")])
@pytest.mark.parametrize("accum", ["deepgemm-hopper", "deepgemm-blackwell"])
def test_tensor_core_c_pass_gives_the_block_path_bits(out_dtype, fmt, data, accum,
                                                      monkeypatch):
    """The tensor-core recipes in one C pass (`mma.deepgemm_gmm`) give the bits of the
    path that forms each block's partials (`mma.promoted_partial`) and accumulates them in
    numba, with an empty group, rows past the last and scales over many binades; on
    adversarial codes (wide exponent spreads in every step) and quantized normals (most
    Blackwell steps on `mma_rows.c`'s exact route)."""
    if mma.ROWS_STATUS != "avx512":
        pytest.skip(f"no C row kernel: {mma.ROWS_STATUS}")
    rng = np.random.default_rng()
    if data == "adversarial":
        lhs, rhs, gs = _adversarial(rng, 300, 384, 150, 4)
    else:
        x = rng.standard_normal((300, 384)) * np.exp2(rng.integers(-12, 12, (300, 1)))
        lhs = quantize(x.astype(np.float32), (1, 128), fmt=fmt)
        rhs = quantize(rng.standard_normal((3, 384, 150)).astype(np.float32), (128, 128),
                       fmt=fmt)
        gs = np.array([120, 0, 170], np.int32)
    calls = []
    real = mma.deepgemm_gmm
    with monkeypatch.context() as mp:
        mp.setattr(mma, "deepgemm_gmm",
                   lambda *a, **k: calls.append(real(*a, **k)) or calls[-1])
        fast = gmm(lhs, rhs, gs, out_dtype, accum)
    assert calls == [True]  # the C pass ran and took the whole gmm
    with monkeypatch.context() as mp:
        mp.setattr(mma, "deepgemm_gmm", lambda *a, **k: False)
        slow = gmm(lhs, rhs, gs, out_dtype, accum)
    np.testing.assert_array_equal(_bits(fast), _bits(slow))
    assert np.any(fast.astype(np.float32)) and not fast[int(gs.sum()):].any()
