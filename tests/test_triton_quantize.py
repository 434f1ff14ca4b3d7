"""Triton quantizer bit-exact to the reference under TRITON_INTERPRET=1 with the
interpreter fix, and provably not without it."""

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fp8check.inputs.strategies import DISTRIBUTIONS, distributions
from fp8check.kernels.triton import fidelity, interpret, quantize_fp8
from fp8check.kernels.triton.convert import to_numpy, to_torch
from fp8check.references import quantize


def _compare(x: np.ndarray, block, recipe):
    values, scales = quantize_fp8(to_torch(x), block, recipe)
    ref = quantize(x, block, recipe)
    return to_numpy(values).view(np.uint8), ref.values.view(np.uint8), scales.numpy(), ref.scales


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(distributions(), st.integers(0, 2**31), st.sampled_from([(1, 128), (128, 128)]),
       st.sampled_from(["deepgemm", "deepgemm-ue8m0"]), st.booleans(),
       st.sampled_from([(130, 256), (2, 64, 200), (1, 384)]))
def test_bit_exact_to_reference(dist, seed, block, recipe, as_bf16, shape):
    fidelity.probe_fidelity()
    x = DISTRIBUTIONS[dist](np.random.default_rng(seed), shape)  # partial blocks included
    if as_bf16:
        x = x.astype(ml_dtypes.bfloat16)
    got_v, ref_v, got_s, ref_s = _compare(x, block, recipe)
    np.testing.assert_array_equal(got_s.view(np.uint32), ref_s.view(np.uint32))
    np.testing.assert_array_equal(got_v, ref_v)


def test_not_bit_exact_without_the_fix():
    x = DISTRIBUTIONS["fp8-ties"](np.random.default_rng(0), (64, 256))
    interpret.remove_fixes()
    try:
        got_v, ref_v, got_s, ref_s = _compare(x, (1, 128), "deepgemm")
    finally:
        interpret.apply_fixes()
    np.testing.assert_array_equal(got_s.view(np.uint32), ref_s.view(np.uint32))
    assert (got_v != ref_v).any()  # the interpreter's own fp8 cast breaks the ties
    got_v, ref_v, _, _ = _compare(x, (1, 128), "deepgemm")
    np.testing.assert_array_equal(got_v, ref_v)


def test_all_zero_and_near_max_blocks():
    x = np.zeros((4, 256), np.float32)
    x[1, :128] = 448.0
    x[2, 5] = -np.float32(np.nextafter(np.float32(464.0), np.float32(0)))
    for recipe in ("deepgemm", "deepgemm-ue8m0"):
        got_v, ref_v, got_s, ref_s = _compare(x, (1, 128), recipe)
        np.testing.assert_array_equal(got_v, ref_v)
        np.testing.assert_array_equal(got_s.view(np.uint32), ref_s.view(np.uint32))


@pytest.mark.parametrize("recipe", ["deepgemm", "deepgemm-ue8m0"])
@pytest.mark.parametrize("block", [(1, 128), (128, 128)])
def test_nonfinite_blocks_propagate_as_the_reference(block, recipe):
    """NaN and +-Inf run through the recipe as quantize(..., nan="propagate") does (NaN
    equal to any NaN: docs/contract.md, "Non-finite inputs"): no raise, no masking."""
    from fp8check.contracts import QuantizerClaims
    from fp8check.layers.op.criteria import quantizer_output_criteria

    x = np.random.default_rng(1).standard_normal((256, 384)).astype(np.float32)
    x[0, 3], x[130, 200], x[5, 300] = np.inf, -np.inf, np.nan
    values, scales = quantize_fp8(to_torch(x), block, recipe)
    m: dict = {}
    crit = quantizer_output_criteria(to_numpy(values), scales.numpy(), x,
                                     QuantizerClaims(recipe, block), m)
    assert crit[0].passed, m
    ref = quantize(x, block, recipe, nan="propagate")
    assert np.isnan(ref.values.astype(np.float32)).any()  # the case has NaN to carry


@pytest.mark.parametrize("x, kw, match", [
    (torch.zeros(4, 4), dict(block=(1, 64)), "block"),
    (torch.zeros(4, 4), dict(recipe="deepseek-v3"), "recipe"),
    (torch.zeros(4, 4, dtype=torch.float16), {}, "float32 or bfloat16"),
])
def test_bad_input_raises(x, kw, match):
    with pytest.raises(ValueError, match=match):
        quantize_fp8(x, **kw)
