"""The Triton FP8 GEMM under the interpreter's Hopper-faithful dot (`interpret.dot_model(
"hopper")`) is bit-exact to `gmm(..., accum="deepgemm-hopper")` at every promotion
interval it offers; the gate's `triton-fp8-hopper` declares that recipe and passes; a
Hopper-accumulating kernel judged as float32 fails, and correct variants pass."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from seeded_bugs.kernels import HopperTensorCore, spec
from tensor_core_support import fp8_tensor, interpreted_gmm_fp8

import fp8check.kernels.triton as tk
from fp8check.inputs.cases import build_suite
from fp8check.kernels.triton import fidelity, interpret
from fp8check.layers.op import build_problem, validate_case
from fp8check.profiles import get_profile
from fp8check.references import gmm, quantize
from fp8check.registry import load_builtin

RNG = np.random.default_rng(27)


@pytest.fixture(scope="module")
def problem():
    fidelity.probe_fidelity()
    x = RNG.standard_normal((200, 384)).astype(np.float32)
    x[:, 130] *= 300  # an outlier channel: small products lost behind it in the tensor core
    w = RNG.standard_normal((3, 384, 256)).astype(np.float32)
    gs = np.array([70, 0, 101], np.int32)
    return quantize(x, (1, 128)), quantize(w, (128, 128)), gs


@pytest.mark.parametrize("interval", [None, 32, 64, 128])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_hopper_dot_is_bit_exact_to_deepgemm_hopper(problem, interval, out_dtype):
    lq, rq, gs = problem
    got = interpreted_gmm_fp8(problem, "hopper", out_dtype, interval)
    rows = int(gs.sum())
    np_dt = np.float32 if out_dtype == torch.float32 else ml_dtypes.bfloat16
    want = gmm(lq, rq, gs, out_dtype=np_dt, accum="deepgemm-hopper", interval=interval or 128)
    np.testing.assert_array_equal(got, want[:rows].astype(np.float32))
    # ... and the tensor core's truncation really is in it: not the exact-partial recipe.
    assert not np.array_equal(got, gmm(lq, rq, gs, out_dtype=np_dt)[:rows].astype(np.float32))


def test_promotion_interval_buys_accuracy(problem):
    """Promoting more often (Triton's max_num_imprecise_acc) shrinks the error."""
    lq, rq, gs = problem
    rows = int(gs.sum())
    exact = gmm(lq, rq, gs, out_dtype=np.float64, accum="exact")[:rows]
    errs = [np.abs(gmm(lq, rq, gs, accum="deepgemm-hopper", interval=i)[:rows] - exact).max()
            for i in (32, 64, 128)]
    assert errs[0] < errs[1] < errs[2]


def test_bad_interval_is_one_line_value_error(problem):
    lq, rq, gs = problem
    with pytest.raises(ValueError, match="max_num_imprecise_acc"):
        tk.gmm_fp8(fp8_tensor(lq.values), torch.from_numpy(lq.scales), fp8_tensor(rq.values),
                   torch.from_numpy(rq.scales), torch.from_numpy(gs),
                   max_num_imprecise_acc=48)
    with pytest.raises(ValueError, match="interval"):
        gmm(lq, rq, gs, accum="deepgemm", interval=32)
    with pytest.raises(ValueError, match="dot model"):
        with interpret.dot_model("tf32"):
            pass


def test_builtin_hopper_kernel_declares_the_tensor_core():
    s = load_builtin("triton-fp8-hopper", "interpret")
    assert (s.matmul_claims.accum, s.matmul_claims.hopper_interval) == ("deepgemm-hopper", 128)
    assert "dot_hopper_mma" in s.fidelity_fixes
    assert load_builtin("triton-fp8", "interpret").matmul_claims.accum == "deepgemm"


@pytest.mark.parametrize("case_index", [0, 3, 7])
def test_hopper_promotion_32_variant_passes(case_index):
    """A Hopper kernel that promotes every k32 step and declares so passes the ci cases;
    judged as promoting every 128 it fails bit-exactness."""
    case = build_suite("ci", 0)[case_index]
    prob = build_problem("gmm-fp8", case)
    profile = get_profile("strict")
    good = spec("numpy-fp8-hopper-32", HopperTensorCore(32), accum="deepgemm-hopper",
                hopper_interval=32)
    res = validate_case(good, case, profile, prob)
    assert res.passed, (case.id, res.failed_criteria)
    wrong = spec("numpy-fp8-hopper-32-as-128", HopperTensorCore(32), accum="deepgemm-hopper")
    res = validate_case(wrong, case, profile, prob)
    assert "bit_exact" in res.failed_criteria
