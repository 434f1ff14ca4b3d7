"""A user's test file: their kernel checked with fp8check's asserts, marker and strategies.

Run it with `pytest tests/user_example --hypothesis-profile=fp8check-ci
--fp8check-report=out/fp8check.html`.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from user_kernels import gmm_fp8, quantize_1x128

from fp8check.inputs import strategies
from fp8check.references import quantize
from fp8check.testing import assert_bitexact, assert_gmm_matches, assert_quantizer_matches


@pytest.mark.fp8check(suite="smoke", kernel="user_kernels:gmm_fp8")
def test_gmm_over_the_gate_suite(fp8check_case):
    out = gmm_fp8(*fp8check_case.args, out_dtype=fp8check_case.out_dtype_as("numpy"))
    fp8check_case.assert_matches(out)


# M = 192 rows over 2 K blocks: enough independent scales for bias_z to be meaningful (on
# a single row, K block and N tile every output shares one scale rounding).  Normal data:
# the impact question (SQNR vs unquantized) is a property of the data, and the
# adversarial distributions are built to quantize badly.
@settings(max_examples=6)
@given(strategies.group_sizes(m=192, g=3), strategies.arrays((192, 256), dist="normal"),
       strategies.arrays((3, 256, 128), dist="normal"))
def test_gmm_on_fuzzed_groups(group_sizes, x, w):
    lq, rq = quantize(x, (1, 128)), quantize(w, (128, 128))
    out = gmm_fp8(lq.values, lq.scales, rq.values, rq.scales, group_sizes)
    assert_gmm_matches(out, x, w, group_sizes, recipe="deepgemm")


def test_gmm_is_deterministic():
    p = strategies.make_gmm_inputs(3, m=200, k=256, n=128, g=4, pattern="zero-middle")
    lq, rq = quantize(p.lhs, (1, 128)), quantize(p.rhs, (128, 128))
    args = (lq.values, lq.scales, rq.values, rq.scales, p.group_sizes)
    assert_bitexact(gmm_fp8(*args), gmm_fp8(*args))


@settings(max_examples=4)
@given(strategies.arrays((64, 256)))
def test_quantizer_matches_deepgemm(x):
    values, scales = quantize_1x128(x)
    assert_quantizer_matches(values, scales, x, (1, 128), "deepgemm")


def test_handwritten_group_sizes():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 384)).astype(np.float32)
    w = rng.standard_normal((3, 384, 128)).astype(np.float32)
    gs = np.array([129, 0, 127], np.int32)  # a residual row on each side of a tile edge
    lq, rq = quantize(x, (1, 128)), quantize(w, (128, 128))
    out = gmm_fp8(lq.values, lq.scales, rq.values, rq.scales, gs)
    assert_gmm_matches(out, lq, rq, gs, unquantized=(x, w))
