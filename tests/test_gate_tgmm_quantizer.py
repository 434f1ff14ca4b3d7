"""The quantizer contract (an independent deepgemm quantizer passes the whole `ci` suite;
a single-bit difference fails bit-exactness) and how validation treats broken kernels."""

import ml_dtypes
import numpy as np
import pytest
from seeded_bugs.kernels import CORRECT, quantize_deepgemm, quantizer_spec

from fp8check.inputs.cases import build_suite
from fp8check.layers.op import build_problem, validate_case
from fp8check.profiles import get_profile

CASES = build_suite("ci", 0)
PROFILE = get_profile("strict")


def test_correct_quantizer_passes_ci():
    spec = CORRECT["numpy-quantizer"]
    failed = [(c.id, r.failed_criteria, r.error)
              for c in CASES if not (r := validate_case(spec, c, PROFILE)).passed]
    assert not failed


def _one_ulp_up(x):
    q, s = quantize_deepgemm(x)
    # nudge one value by one code: the gate must see a single-bit difference
    bits = q.view(np.uint8).copy()
    bits[0, 0] ^= 1
    return bits.view(ml_dtypes.float8_e4m3fn), s


def _scale_one_ulp_up(x):
    q, s = quantize_deepgemm(x)
    return q, np.nextafter(s, np.float32(np.inf))


@pytest.mark.parametrize("fn, counter", [(_one_ulp_up, "value_mismatches"),
                                         (_scale_one_ulp_up, "scale_mismatches")])
def test_quantizer_single_bit_difference_fails(fn, counter):
    res = validate_case(quantizer_spec("q", fn), CASES[0], PROFILE)
    assert res.failed_criteria == ["quantizer_bit_exact"]
    assert res.metrics[counter] >= 1


def test_kernel_exception_and_wrong_shape_are_failures_not_crashes():
    def raises(*args, **kw):
        raise RuntimeError("device lost")

    def wrong_shape(lhs, dy, gs, out_dtype=np.float32):
        return np.zeros((1, 1), out_dtype)

    from seeded_bugs.kernels import tgmm_spec

    case = CASES[0]
    prob = build_problem("tgmm", case)
    r1 = validate_case(tgmm_spec("boom", raises), case, PROFILE, prob)
    r2 = validate_case(tgmm_spec("shape", wrong_shape), case, PROFILE, prob)
    assert r1.passed is False and "RuntimeError: device lost" in r1.error
    assert r2.passed is False and "returned shape (1, 1)" in r2.error


def test_nondeterministic_declaration_runs_once_without_determinism_check():
    import dataclasses

    calls = []

    def counting(lhs, dy, gs, out_dtype=np.float32):
        calls.append(1)
        return CORRECT["numpy-tgmm"].fn(lhs, dy, gs, out_dtype)

    correct = CORRECT["numpy-tgmm"]
    spec = dataclasses.replace(correct, fn=counting, claims=dataclasses.replace(
        correct.matmul_claims, deterministic=False))
    case = CASES[0]
    res = validate_case(spec, case, PROFILE, build_problem("tgmm", case))
    assert res.passed and len(calls) == 1
    assert "deterministic" not in {c.name for c in res.criteria}
