"""fp8check.testing: the asserts apply the gate's criteria (same verdicts), the failure
message locates the worst element, the saved inputs replay, bad input is a ValueError."""

import functools
import re

import ml_dtypes
import numpy as np
import pytest
from seeded_bugs.kernels import (
    BlockwiseGmm,
    ShiftedGroupStart,
    TruncatingBf16Cast,
    quantize_deepgemm,
    quantize_no_amax_guard,
    spec,
    tgmm_amax_normalised,
    tgmm_f32,
)

from fp8check import testing
from fp8check.contracts import call_kernel
from fp8check.inputs.cases import build_suite
from fp8check.layers.op import build_problem, validate_case
from fp8check.profiles import get_profile
from fp8check.references import quantize

BF16 = np.dtype(ml_dtypes.bfloat16)
SMOKE = build_suite("smoke", 0)
KERNELS = {
    "correct-deepgemm": spec("correct-deepgemm", BlockwiseGmm(), accum="deepgemm"),
    "bug-shifted-group-start": spec("bug-shifted-group-start", ShiftedGroupStart()),
    "bug-truncating-bf16-cast": spec("bug-truncating-bf16-cast", TruncatingBf16Cast()),
}


@pytest.fixture(autouse=True)
def _failures_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv(testing.FAILURE_DIR_ENV, str(tmp_path / "failures"))


def _outcome(fn):
    """(passed, failed criteria, message) of one assertion."""
    got = []
    testing.add_listener(got.append)
    try:
        fn()
        message = None
    except AssertionError as e:
        message = str(e)
    finally:
        testing.remove_listener(got.append)
    (res,) = got
    return res.passed, res.failed_criteria, message


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_gate_case_verdict_is_the_gates(name):
    kernel = KERNELS[name]
    for case in SMOKE:
        prob = build_problem("gmm-fp8", case)
        gate = validate_case(kernel, case, get_profile("strict"), prob)
        gate_case = testing.GateCase(case, suite="smoke")
        gate_case._problem = prob
        out = call_kernel(kernel, gate_case.args, case.out_dtype)
        check = functools.partial(gate_case.assert_matches, out,
                                  accum=kernel.matmul_claims.accum)
        passed, failed, _ = _outcome(check)
        assert (passed, failed) == (gate.passed, gate.failed_criteria), case.id
        if name.startswith("bug-shifted"):
            assert not passed  # the bug shows on every smoke case


def test_exact_partials_detector_agrees_with_the_suites_construction():
    cases = SMOKE + [c for c in build_suite("ci", 0) if c.exact_partials][:2]
    for case in cases:
        prob = build_problem("gmm-fp8", case)
        lq, rq = prob.quantized
        assert testing.partials_exact_in_f32(lq, rq, prob.args[-1]) == case.exact_partials, case.id


def test_detector_catches_a_sum_past_2_to_24_units():
    # every value 448 = 7 * 2^6: products are multiples of 2^12 and 128 of them sum to
    # 6272 such units, exact in float32
    lq = quantize(np.full((1, 128), 448.0, np.float32), (1, 128))
    rq = quantize(np.full((1, 128, 128), 448.0, np.float32), (128, 128))
    gs = np.array([1], np.int32)
    assert testing.partials_exact_in_f32(lq, rq, gs)
    # one smallest subnormal (2^-9) in the row: the sum 127 * 448^2 + 2^-9 * 448 needs
    # 28 significant bits, more than float32's 24
    odd = lq.values.copy()
    odd[0, 0] = ml_dtypes.float8_e4m3fn(2.0**-9)
    tiny = type(lq)(odd, lq.scales, lq.block, lq.fmt, lq.recipe)
    assert not testing.partials_exact_in_f32(tiny, rq, gs)


def _gmm_data(seed, m=300, k=256, n=256, gs=(100, 0, 170)):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((len(gs), k, n)).astype(np.float32)
    return x, w, np.array(gs, np.int32)


def test_nan_injected_anywhere_is_located_by_group_row_and_tile():
    rng = np.random.default_rng(7)
    x, w, gs = _gmm_data(7)
    lq, rq = quantize(x, (1, 128)), quantize(w, (128, 128))
    out = BlockwiseGmm()(lq.values, lq.scales, rq.values, rq.scales, gs)
    r, c = int(rng.integers(100, 270)), int(rng.integers(0, 256))  # inside group 2
    out[r, c] = np.nan
    passed, failed, msg = _outcome(lambda: testing.assert_gmm_matches(out, lq, rq, gs))
    assert not passed and failed[0] == "finite"
    assert f"worst element: index ({r}, {c}), group 2 (rows 100-269), row {r - 100} of the " \
           f"group, N tile {c // 128}" in msg
    assert "elements finite, NaN or +-Inf unlike the exact value: 1 / " in msg


def test_truncating_cast_fails_bias_with_counts_and_replays(tmp_path):
    # enough (group, 128-column tile) clusters for the sign test's power: 3 groups x 4
    x, w, gs = _gmm_data(3, m=600, n=512, gs=(150, 0, 200, 250))
    lq, rq = quantize(x, (1, 128)), quantize(w, (128, 128))
    out = TruncatingBf16Cast()(lq.values, lq.scales, rq.values, rq.scales, gs, out_dtype=BF16)
    assert out.dtype == BF16
    passed, failed, msg = _outcome(
        lambda: testing.assert_gmm_matches(out, x, w, gs, recipe="deepgemm"))
    assert not passed and "bias_z" in failed
    assert re.search(r"bias_z: \|-?\d+(\.\d+)?\|, must be <= 6", msg)
    path = re.search(r"replay\('(.*?)'\)", msg).group(1)
    assert path.startswith(str(tmp_path / "failures"))
    with pytest.raises(AssertionError) as again:
        testing.replay(path)
    assert str(again.value) == msg  # same inputs (bf16 bits kept), same verdict and file


def test_tgmm_nan_from_an_empty_group():
    rng = np.random.default_rng(11)
    lhs = rng.standard_normal((200, 256)).astype(BF16)
    dy = rng.standard_normal((200, 128)).astype(BF16)
    gs = np.array([120, 0, 80], np.int32)
    testing.assert_tgmm_matches(tgmm_f32(lhs, dy, gs), lhs, dy, gs)
    bad = tgmm_amax_normalised(lhs, dy, gs)
    passed, failed, msg = _outcome(lambda: testing.assert_tgmm_matches(bad, lhs, dy, gs))
    assert not passed and failed[0] == "finite"
    assert "worst element: index (1, 0, 0), group 1 (rows 120-119, M_g = 0), K tile 0" in msg


def test_quantizer_bug_and_the_correct_one():
    x = np.random.default_rng(5).standard_normal((64, 512)).astype(np.float32)
    x[3, 256:384] = 0.0  # an all-zero block: the unguarded amax divides by zero
    testing.assert_quantizer_matches(*quantize_deepgemm(x), x, (1, 128), "deepgemm")
    passed, failed, msg = _outcome(lambda: testing.assert_quantizer_matches(
        *quantize_no_amax_guard(x), x, (1, 128), "deepgemm"))
    assert failed == ["quantizer_bit_exact"]
    assert "worst value: index (3, 256), block (3, 2) of 1x128" in msg
    assert "values and scales that differ: 129 / " in msg  # 128 NaN values + 1 zero scale


def test_assert_bitexact():
    a = np.random.default_rng(2).standard_normal((16, 32)).astype(np.float32)
    testing.assert_bitexact(a, a.copy())
    b = a.copy()
    b[5, 7] = np.nextafter(b[5, 7], np.float32(np.inf))
    passed, failed, msg = _outcome(lambda: testing.assert_bitexact(a, b))
    assert failed == ["bit_exact"] and "index (5, 7)" in msg and "ULP distance: 1" in msg
    with pytest.raises(AssertionError, match="float32"):
        testing.assert_bitexact(a, a.astype(np.float64))


@pytest.mark.parametrize("bad, match", [
    (dict(out=np.zeros((300, 256), np.float16)), "out has dtype float16"),
    (dict(gs=np.array([200, 0, 170], np.int32)), "sum <= 300"),
    (dict(gs=np.array([300], np.int32)), "must be 3 integers"),
    (dict(out=np.zeros((299, 256), np.float32)), "expected \\[300, 256\\]"),
    (dict(accum="deepgemm"), "accum needs quantized operands"),
    (dict(profile="off"), "never off"),
])
def test_bad_input_is_a_value_error(bad, match):
    x, w, gs = _gmm_data(1)
    args = dict(out=np.zeros((300, 256), np.float32), gs=gs)
    args.update(bad)
    kw = {k: v for k, v in args.items() if k in ("accum", "profile")}
    with pytest.raises(ValueError, match=match):
        testing.assert_gmm_matches(args["out"], x, w, args["gs"], **kw)
