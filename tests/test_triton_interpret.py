"""The interpreter fidelity self-test: each claimed fault exists without the fix, the
fix removes all of them, and the record says what was active."""

import ml_dtypes
import numpy as np
import pytest
import torch

# Imported before triton itself: the package selects interpret mode before triton loads.
from fp8check.kernels.triton import fidelity, interpret

tl = fidelity.tl


@pytest.fixture
def unfixed():
    """The raw interpreter for one test; the fix is restored afterwards."""
    interpret.remove_fixes()
    yield
    interpret.apply_fixes()


def _cast_e4m3(values) -> np.ndarray:
    x = np.asarray(values, np.float32)
    bits = fidelity._run_cast(x, tl.float8e4nv, torch.float8_e4m3fn)
    return bits.view(ml_dtypes.float8_e4m3fn).astype(np.float32)


def test_raw_interpreter_has_the_documented_faults(unfixed):
    # The faults the issue reports, checked directly rather than through the self-test.
    got = _cast_e4m3([1.97, 126.5, 1.0625, 500.0])
    assert got.tolist() == [1.0, 64.0, 1.125, 256.0]
    want = np.clip(np.array([1.97, 126.5, 1.0625, 500.0], np.float32), -448, 448)
    assert want.astype(ml_dtypes.float8_e4m3fn).astype(np.float32).tolist() == [
        2.0, 128.0, 1.0, 448.0]
    report = fidelity.self_test()
    assert set(report.faults) == set(interpret.FIDELITY_FIXES + interpret.MODEL_CHOICES)


def test_fix_removes_every_fault():
    interpret.apply_fixes()
    report = fidelity.self_test()
    assert report.ok, report.mismatches
    got = _cast_e4m3([1.97, 126.5, 1.0625, 500.0, -1e30, np.nan])
    assert got[:5].tolist() == [2.0, 128.0, 1.0, 448.0, -448.0]
    assert np.isnan(got[5])


def test_fix_matches_ml_dtypes_on_random_values():
    interpret.apply_fixes()
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(3000) * np.exp2(rng.integers(-12, 10, 3000))).astype(np.float32)
    want = np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    np.testing.assert_array_equal(_cast_e4m3(x), want)


def test_record_names_faults_and_fixes():
    rec = fidelity.probe_fidelity()
    assert rec.interpreter
    assert set(rec.faults_before_fix) == set(interpret.FIDELITY_FIXES + interpret.MODEL_CHOICES)
    assert rec.fixes == interpret.active_fixes()
    assert not any(rec.faults_after_fix.values())
    assert rec.to_dict()["fixes"] == rec.fixes


@fidelity.triton.jit
def _twice(x):
    return x * 2 + tl.program_id(0)


@fidelity.triton.jit
def _device_call_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, _twice(tl.load(x_ptr + offs)))


def test_speedups_keep_what_kernels_compute():
    """`apply_fixes` skips the interpreter's re-patch of triton.language at each device
    function call inside a launch and its discarded overflow check, and memoises its dtype
    map (time only): the map gives the same dtypes, the device function still computes
    with the patched language, the language is restored after the launch, and
    `remove_fixes` restores all three."""
    from triton.runtime import interpreter

    interpret.apply_fixes()
    assert interpreter._patch_lang is interpret._patch_lang_once
    assert interpreter._get_np_dtype is interpret._np_dtype
    for t in (tl.bfloat16, tl.float8e4nv, tl.int1, tl.pointer_type(tl.float32),
              tl.block_type(tl.float32, [4, 8]), tl.block_type(tl.pointer_type(tl.int8), [2])):
        assert interpret._np_dtype(t) == interpret._SPED_UP["_get_np_dtype"](t)
    options = interpreter.interpreter_builder.options
    assert not options.debug and not options.sanitize_overflow
    x = torch.arange(64, dtype=torch.float32)
    out = torch.empty_like(x)
    _device_call_kernel[(4,)](x, out, BLOCK=16)
    np.testing.assert_array_equal(out.numpy(), x.numpy() * 2 + np.repeat(np.arange(4), 16))
    assert tl.core.is_builtin(tl.program_id)  # the launch's scope restored the language
    interpret.remove_fixes()
    assert interpreter._patch_lang is not interpret._patch_lang_once
    assert interpreter.interpreter_builder.options.sanitize_overflow
    assert interpreter._get_np_dtype is not interpret._np_dtype
    interpret.apply_fixes()
