"""The Triton FP8 GEMM under the interpreter's Blackwell dot (`interpret.dot_model(
"blackwell")`, the sm_100a tensor-core model) is bit-exact to `gmm(...,
accum="deepgemm-blackwell")`, ignores max_num_imprecise_acc as Triton's sm_100 dot does,
and is not the Hopper accumulator's result."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from tensor_core_support import interpreted_gmm_fp8

from fp8check.kernels.triton import fidelity
from fp8check.references import gmm, quantize

RNG = np.random.default_rng(28)


@pytest.fixture(scope="module")
def problem():
    fidelity.probe_fidelity()
    x = RNG.standard_normal((150, 256)).astype(np.float32)
    x[:, 3] *= 300  # an outlier channel: block partials that need more than float32's bits
    x[:, 200] *= 1e-3
    w = RNG.standard_normal((2, 256, 128)).astype(np.float32)
    gs = np.array([61, 80], np.int32)
    return quantize(x, (1, 128)), quantize(w, (128, 128)), gs


def _run(problem, out_dtype, interval=None):
    return interpreted_gmm_fp8(problem, "blackwell", out_dtype, interval)


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_blackwell_dot_is_bit_exact_to_deepgemm_blackwell(problem, out_dtype):
    lq, rq, gs = problem
    rows = int(gs.sum())
    np_dt = np.float32 if out_dtype == torch.float32 else ml_dtypes.bfloat16
    got = _run(problem, out_dtype)
    want = gmm(lq, rq, gs, out_dtype=np_dt, accum="deepgemm-blackwell")[:rows]
    np.testing.assert_array_equal(got, want.astype(np.float32))
    hopper = gmm(lq, rq, gs, out_dtype=np_dt, accum="deepgemm-hopper")[:rows]
    assert not np.array_equal(got, hopper.astype(np.float32))


def test_sm100_dot_has_no_promotion_interval(problem):
    """Triton's sm_100 dot ignores max_num_imprecise_acc; gmm refuses an interval for the
    Blackwell recipe."""
    np.testing.assert_array_equal(_run(problem, torch.float32, 32),
                                  _run(problem, torch.float32))
    lq, rq, gs = problem
    with pytest.raises(ValueError, match="interval"):
        gmm(lq, rq, gs, accum="deepgemm-blackwell", interval=32)


def test_builtin_blackwell_kernel_declares_the_tensor_core_and_passes():
    """`triton-fp8-blackwell` declares deepgemm-blackwell and passes a ci case bit for bit;
    the same outputs judged as the Hopper accumulator fail (the recipe is not a label)."""
    from dataclasses import replace

    from fp8check.inputs.cases import build_suite
    from fp8check.layers.op.problem import build_problem
    from fp8check.layers.op.validate import validate_case
    from fp8check.profiles import get_profile
    from fp8check.registry import load_builtin

    s = load_builtin("triton-fp8-blackwell", "interpret")
    claims = s.matmul_claims
    assert (claims.accum, claims.hopper_interval) == ("deepgemm-blackwell", 128)
    assert "dot_blackwell_mma" in s.fidelity_fixes
    case = build_suite("ci", 0)[0]
    prob = build_problem("gmm-fp8", case)
    profile = get_profile("strict")
    res = validate_case(s, case, profile, prob)
    assert res.passed, res.failed_criteria
    assert res.metrics["bit_exact_mismatches"] == 0
    as_hopper = validate_case(replace(s, claims=replace(claims, accum="deepgemm-hopper")),
                              case, profile, prob)
    assert "bit_exact" in as_hopper.failed_criteria


@pytest.mark.parametrize("capability, dot", [((9, 0), "hopper"), ((10, 0), "blackwell"),
                                             ((8, 9), None), ((12, 0), None)])
def test_compiled_kernel_declares_its_gpus_tensor_core(monkeypatch, capability, dot):
    """Compiled, the FP8 GEMM declares the recipe of the GPU it runs on: sm_90 Hopper,
    sm_100 Blackwell; a GPU fp8check has no model of is refused, not judged as another."""
    from fp8check.kernels.triton import spec

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    if dot is None:
        with pytest.raises(ValueError, match="no FP8 tensor-core model"):
            spec._native_dot()
    else:
        assert spec._native_dot() == dot
