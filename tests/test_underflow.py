"""The error bound's underflow and flush-to-zero terms (fp8check.measures.underflow), the subnormal
case family (fp8check.inputs.subnormal) and the flushes_subnormals declaration.

Kernels here are numpy float32 evaluations in several valid orders: numpy keeps IEEE
subnormals (no FTZ), so their roundings are the standard model's with underflow; FTZ is
simulated by flushing every result below 2^-126."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from fp8check.contracts import KernelSpec, MatmulClaims
from fp8check.inputs.cases import build_suite, case_inputs
from fp8check.layers.op import ProblemCache, validate_case
from fp8check.layers.op.problem import gmm_fp8_problem, unscaled_gmm_problem
from fp8check.measures import metrics
from fp8check.measures.underflow import ETA, FLUSH, fp8_model
from fp8check.profiles import get_profile
from fp8check.references import gmm
from fp8check.references.quant import QTensor

BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
F32 = np.float32
U = 2.0**-24
TINY = F32(2.0**-126)
SUBNORMAL_CASES = [c for c in build_suite("ci", 0) if c.distribution == "subnormal"]
PROBLEMS = ProblemCache(capacity=6)


def _ftz(x):
    return np.where(np.abs(x) < TINY, F32(0), x).astype(F32)


def _keep(x):
    return x


# ---------------------------------------------------------------- float32 valid orders


def _unscaled_sequential(a, b, flush=_keep, reverse=False):
    """sum_k RN(a_k b_k) left to right (or right to left), float32, [M,K] @ [K,N]."""
    acc = np.zeros((a.shape[0], b.shape[1]), F32)
    ks = range(a.shape[1] - 1, -1, -1) if reverse else range(a.shape[1])
    for k in ks:
        acc = flush(acc + flush(a[:, k, None].astype(F32) * b[None, k].astype(F32)))
    return acc


def _unscaled_pairwise(a, b, flush=_keep):
    p = flush(a.astype(F32)[:, :, None] * b.astype(F32)[None])
    while p.shape[1] > 1:
        if p.shape[1] % 2:
            p = np.concatenate([p, np.zeros_like(p[:, :1])], axis=1)
        p = flush(p[:, 0::2] + p[:, 1::2])
    return p[:, 0]


def _fp8_orders(lq, rq, flush=_keep):
    """One-group gmm-fp8 in three valid float32 orders: DeepGEMM's acc += RN(sa sb) P_b,
    sa (sb P_b) per block, and dequantize-first sum_k RN(RN(sa qa) RN(sb qb))."""
    a, b = lq.values.astype(F32), rq.values[0].astype(F32)
    sa, sb = lq.scales.astype(F32), rq.scales[0].astype(F32)
    m, k = a.shape
    n = b.shape[1]
    deepgemm = np.zeros((m, n), F32)
    nested = np.zeros((m, n), F32)
    for kb in range(k // 128):
        blk = slice(kb * 128, (kb + 1) * 128)
        p = np.zeros((m, n), F32)
        for t in range(blk.start, blk.stop):  # exact: fp8 products and sums stay normal
            p = p + a[:, t, None] * b[None, t]
        sbn = np.repeat(sb[kb], 128)[None, :]
        s = flush(sa[:, kb, None] * sbn)
        deepgemm = flush(deepgemm + flush(s * p))
        nested = flush(nested + flush(sa[:, kb, None] * flush(sbn * p)))
    da = flush(a * np.repeat(sa, 128, axis=1))
    db = flush(b * np.repeat(np.repeat(sb, 128, axis=0), 128, axis=1))
    dequant = _unscaled_sequential(da, db, flush)
    return {"deepgemm": deepgemm, "sa-(sb-P)": nested, "dequantize-first": dequant}


def _ratio(out, exact, abs_ab, k, underflow, out_dtype=np.float32):
    return metrics.bound_ratio(out.astype(out_dtype), exact, abs_ab, k, out_dtype=out_dtype,
                               underflow=underflow)


# ------------------------------------------------------------ plain: roots underflow


def _tie_operands(rng, m=8, k=256, n=16):
    """bf16 operands whose every product is (4j + 3) 2^-150 > 0: a rounding tie in the
    subnormal range that RNE breaks upward by exactly 2^-150 (to the even neighbour
    (4j + 4) 2^-150), so every valid order errs by exactly K 2^-150 (the sums of
    subnormal multiples of 2^-149 are exact)."""
    a = (4 * rng.integers(0, 60, size=(m, k)) + 3) * 2.0**-75
    b = np.full((k, n), 2.0**-75)
    return a.astype(BF16), b.astype(BF16)


def _unscaled_problem(a, b):
    return unscaled_gmm_problem(a, b[None], np.array([a.shape[0]], np.int32), "f32")


def test_plain_tie_products_reach_the_underflow_term_and_halving_it_fails():
    a, b = _tie_operands(np.random.default_rng(0))
    prob = _unscaled_problem(a, b)
    term = prob.underflow.term(ftz=False, u=U)
    assert term == a.shape[1] * ETA
    for out in (_unscaled_sequential(a, b), _unscaled_sequential(a, b, reverse=True),
                _unscaled_pairwise(a, b)):
        err = out.astype(np.float64) - prob.exact
        assert np.all(err == a.shape[1] * ETA)  # the construction, checked
        assert np.all(_ratio(out, prob.exact, prob.abs_ab, a.shape[1], term) <= 1.0)
        # without the term, and with half of it, the legit orders exceed the bound
        assert np.all(_ratio(out, prob.exact, prob.abs_ab, a.shape[1], 0.0) > 1.0)
        assert np.all(_ratio(out, prob.exact, prob.abs_ab, a.shape[1], term / 2) > 1.0)


def test_plain_random_subnormal_products_stay_within_the_bound():
    rng = np.random.default_rng(1)
    for _ in range(5):
        k = int(rng.integers(2, 300))
        a = (rng.standard_normal((16, k)) * 2.0**-70).astype(BF16)
        b = (rng.standard_normal((k, 24)) * 2.0 ** float(rng.integers(-82, -70))).astype(BF16)
        prob = _unscaled_problem(a, b)
        term = prob.underflow.term(ftz=False, u=U)
        for out in (_unscaled_sequential(a, b), _unscaled_pairwise(a, b),
                    _unscaled_sequential(a, b, reverse=True)):
            assert np.max(_ratio(out, prob.exact, prob.abs_ab, k, term)) <= 1.0


# ------------------------------------------- gmm-fp8: DeepGEMM's RN(sa sb) underflows


def _tiny_scale_operands(rng, m=64, k=256, n=128):
    """e4m3 values at +-448 (so |P_b| = 128 448^2 ~ 2^24.6) and scales that are not
    powers of two with sa sb ~ 2^-139: DeepGEMM's RN(sa sb) is a subnormal with an error
    up to 2^-150, which P_b amplifies to ~2^-125 per block."""
    va = (448.0 * rng.choice((-1.0, 1.0), size=(m, k))).astype(E4M3)
    vb = np.full((1, k, n), 448.0).astype(E4M3)
    sa = (2.0**-70 * (1 + rng.random((m, k // 128)))).astype(F32)
    sb = (2.0**-70 * (1 + rng.random((1, k // 128, n // 128)))).astype(F32)
    lq = QTensor(va, sa, (1, 128), "e4m3fn", "deepgemm")
    rq = QTensor(vb, sb, (128, 128), "e4m3fn", "deepgemm")
    return lq, rq


def test_fp8_amplified_underflow_needs_the_conservative_term():
    lq, rq = _tiny_scale_operands(np.random.default_rng(2))
    k = lq.shape[1]
    prob = gmm_fp8_problem(lq, rq, np.array([lq.shape[0]], np.int32), "f32")
    model = prob.underflow
    assert not model.nonroot_exact and not model.nonroot_normal
    term = model.term(ftz=False, u=U)
    orders = _fp8_orders(lq, rq)
    orders["reference-deepgemm"] = gmm(lq, rq, np.array([lq.shape[0]]), np.float32,
                                       "deepgemm")
    for name, out in orders.items():
        assert np.max(_ratio(out, prob.exact, prob.abs_ab, k, term)) <= 1.0, name
    # the roots-only term (what the precondition would give) is far too small for
    # DeepGEMM's order: the amplified e of RN(sa sb) is real
    roots_only = k * ETA
    assert np.max(_ratio(orders["deepgemm"], prob.exact, prob.abs_ab, k, roots_only)) > 1
    assert np.max(_ratio(orders["sa-(sb-P)"], prob.exact, prob.abs_ab, k, roots_only)) <= 1


def test_fp8_model_preconditions():
    rng = np.random.default_rng(3)
    lq, rq = _tiny_scale_operands(rng)
    pow2 = QTensor(lq.values, np.full_like(lq.scales, 2.0**-66), lq.block, lq.fmt, "x")
    pow2_b = QTensor(rq.values, np.full_like(rq.scales, 2.0**-65), rq.block, rq.fmt, "x")
    exact = fp8_model(pow2, pow2_b, 256)  # sa sb = 2^-131: a subnormal power of two
    assert exact.nonroot_exact and not exact.nonroot_normal and not exact.subnormal_free
    below = QTensor(rq.values, np.full_like(rq.scales, 2.0**-66), rq.block, rq.fmt, "x")
    assert not fp8_model(pow2, below, 256).nonroot_exact  # 2^-132 2^-18 < 2^-149
    normal = QTensor(lq.values, np.full_like(lq.scales, 2.0**-20), lq.block, lq.fmt, "x")
    model = fp8_model(normal, QTensor(rq.values, np.full_like(rq.scales, 2.0**-20),
                                      rq.block, rq.fmt, "x"), 256)
    assert model.nonroot_normal and model.subnormal_free
    # scales <= 1: a flushed sum is amplified by at most 2 (computed scale factors)
    assert model.term(ftz=False, u=U) == 256 * ETA and model.term(ftz=True, u=U) == 768 * FLUSH
    assert model.term(ftz=False, u=2.0**-8) == 256 * ETA  # no conservative part: any u
    with pytest.raises(ValueError, match="u <= 2"):
        fp8_model(lq, rq, 256).term(ftz=False, u=2.0**-8)


# ------------------------------------------------------------------- flush to zero


def test_ftz_orders_stay_within_the_flush_term():
    for a, b in (_tie_operands(np.random.default_rng(4)),
                 ((np.random.default_rng(5).standard_normal((8, 200)) * 2.0**-64).astype(BF16),
                  (np.random.default_rng(6).standard_normal((200, 12)) * 2.0**-64).astype(BF16))):
        prob = _unscaled_problem(a, b)
        k = a.shape[1]
        ftz_term = prob.underflow.term(ftz=True, u=U)
        for out in (_unscaled_sequential(a, b, _ftz), _unscaled_pairwise(a, b, _ftz)):
            assert np.max(_ratio(out, prob.exact, prob.abs_ab, k, ftz_term)) <= 1.0


def test_flush_term_is_attained_within_a_factor_two():
    # every product (2^-126 - 2^-134) flushes to 0: the error is K (2^-126 - 2^-134),
    # just under half of the term 2K 2^-126 (the other half covers flushed sums)
    k = 64
    a = np.full((4, k), (1 - 2.0**-8) * 2.0**-63).astype(BF16)
    b = np.full((k, 8), 2.0**-63).astype(BF16)
    prob = _unscaled_problem(a, b)
    out = _unscaled_sequential(a, b, _ftz)
    assert not np.any(out)
    ratio = _ratio(out, prob.exact, prob.abs_ab, k, prob.underflow.term(ftz=True, u=U))
    assert 0.49 < np.min(ratio) and np.max(ratio) <= 1.0


def test_subnormal_bf16_inputs_read_as_zero_are_covered():
    rng = np.random.default_rng(7)
    a = (rng.uniform(-1, 1, (8, 64)) * 2.0**-127).astype(BF16)  # all subnormal
    b = (rng.standard_normal((64, 8)) * 2.0**30).astype(BF16)
    prob = _unscaled_problem(a, b)
    assert not prob.underflow.nonroot_normal
    out = _unscaled_sequential(_ftz(a.astype(F32)), b, _ftz)  # DAZ: inputs read as 0
    assert np.max(np.abs(prob.exact)) > 2.0**-100 and not np.any(out)
    assert np.max(_ratio(out, prob.exact, prob.abs_ab, 64,
                         prob.underflow.term(ftz=True, u=U))) <= 1.0
    assert np.max(_ratio(out, prob.exact, prob.abs_ab, 64, 0.0)) > 1.0


# ------------------------------------------------------------- the subnormal cases


@pytest.mark.parametrize("case", SUBNORMAL_CASES, ids=lambda c: c.id)
def test_subnormal_case_is_exact_in_every_order_and_reaches_the_range(case):
    prob = PROBLEMS.get("gmm-fp8", case)[0]
    lq, rq = prob.quantized
    assert np.all(lq.scales == F32(2.0**-66)) and np.all(rq.scales == F32(2.0**-65))
    inp = case_inputs(case)
    # quantization is exact: the dequantized operands are the inputs
    assert np.array_equal(lq.values.astype(np.float64) * 2.0**-66, inp.x.astype(np.float64))
    rows = prob.rows
    exact = prob.exact[:rows]
    nz = np.abs(exact[exact != 0])
    assert np.mean(nz < 2.0**-126) > 0.9 and nz.min() <= 2.0**-145
    # exact against rationals on a sample of elements
    rng = np.random.default_rng(0)
    gs = np.asarray(case.group_sizes)
    for i in rng.integers(0, rows, size=4):
        g = int(np.searchsorted(np.cumsum(gs), i, side="right"))
        j = int(rng.integers(0, case.n))
        want = sum(Fraction(float(x)) * Fraction(float(w))
                   for x, w in zip(inp.x[i], inp.w[g, :, j], strict=True))
        assert Fraction(float(exact[i, j])) == want
    # valid float32 orders are bit-exact: the references' recipes and numpy's own
    for accum in ("deepgemm", "cublas", "tokamax"):
        ref = gmm(lq, rq, gs, np.float32, accum)[:rows]
        assert np.array_equal(ref.astype(np.float64), exact), accum
    g0 = int(np.argmax(gs))
    r0 = int(gs[:g0].sum())
    one = (QTensor(lq.values[r0:r0 + 16], lq.scales[r0:r0 + 16], lq.block, lq.fmt, lq.recipe),
           QTensor(rq.values[g0:g0 + 1, :, :128], rq.scales[g0:g0 + 1, :, :1], rq.block,
                   rq.fmt, rq.recipe))
    for name, out in _fp8_orders(*one).items():
        assert np.array_equal(out.astype(np.float64), exact[r0:r0 + 16, :128]), name
    plain = PROBLEMS.get("gmm", case)[0]
    assert np.array_equal(plain.naive[:rows].astype(np.float64),
                          plain.exact[:rows].astype(np.float32).astype(np.float64)
                          if case.out_dtype == "f32" else
                          plain.exact[:rows].astype(BF16).astype(np.float64))


def test_ftz_deepgemm_order_fails_undeclared_and_passes_declared():
    case = SUBNORMAL_CASES[0]
    prob = PROBLEMS.get("gmm-fp8", case)[0]
    lq, rq = prob.quantized
    one = (QTensor(lq.values[:64], lq.scales[:64], lq.block, lq.fmt, lq.recipe),
           QTensor(rq.values[:1], rq.scales[:1], rq.block, rq.fmt, rq.recipe))
    sub = gmm_fp8_problem(*one, np.array([64], np.int32), "f32")
    out = _fp8_orders(*one, flush=_ftz)["deepgemm"]
    assert not np.any(out)  # RN(sa sb) = 2^-131 flushes: every output is 0
    k = lq.shape[1]
    assert np.max(_ratio(out, sub.exact, sub.abs_ab, k, sub.underflow.term(ftz=False, u=U))) > 100
    assert np.max(_ratio(out, sub.exact, sub.abs_ab, k, sub.underflow.term(ftz=True, u=U))) <= 1


# ------------------------------------------------------------- the declaration


def _jax_gmm(lhs, rhs, group_sizes, out_dtype=None):
    import jax.numpy as jnp

    ends = np.cumsum(np.asarray(group_sizes))
    rows = []
    for g, end in enumerate(ends):
        start = end - int(np.asarray(group_sizes)[g])
        rows.append(jnp.dot(lhs[start:end], rhs[g], preferred_element_type=jnp.float32))
    out = jnp.concatenate(rows + [jnp.zeros((lhs.shape[0] - int(ends[-1]), rhs.shape[2]),
                                            jnp.float32)])
    return out.astype(out_dtype or jnp.float32)


def test_flushes_subnormals_defaults_by_framework():
    def fn(*a, **k):
        return None

    assert KernelSpec("j", "gmm", "jax", fn).matmul_claims.flushes_subnormals is True
    assert KernelSpec("n", "gmm", "numpy", fn).matmul_claims.flushes_subnormals is False
    assert KernelSpec("t", "gmm", "torch", fn).matmul_claims.flushes_subnormals is False
    ieee = MatmulClaims(flushes_subnormals=False)
    assert KernelSpec("d", "gmm", "jax", fn, ieee).matmul_claims.flushes_subnormals is False
    with pytest.raises(ValueError, match="flushes_subnormals"):
        MatmulClaims(flushes_subnormals=1)  # type: ignore[arg-type]


def test_jax_kernel_passes_by_default_and_fails_declaring_ieee():
    """XLA:CPU flushes: a plain jax gmm declaring nothing passes the subnormal f32 case,
    saying the range was not checked precisely; declared IEEE it fails the bound."""
    case = SUBNORMAL_CASES[0]
    prob = PROBLEMS.get("gmm", case)[0]
    profile = get_profile("strict")
    default = KernelSpec("jax-gmm", "gmm", "jax", _jax_gmm)
    res = validate_case(default, case, profile, prob)
    assert res.passed, (res.failed_criteria, res.error)
    assert "not checked precisely" in res.metrics["subnormal_range"]
    ieee = KernelSpec("jax-gmm-ieee", "gmm", "jax", _jax_gmm,
                      MatmulClaims(flushes_subnormals=False))
    res = validate_case(ieee, case, profile, prob)
    assert "bound_ratio" in res.failed_criteria


def test_testing_asserts_take_the_declaration(tmp_path, monkeypatch):
    from fp8check.testing import assert_gmm_matches

    monkeypatch.chdir(tmp_path)  # a failing assertion saves its replay file here
    inp = case_inputs(SUBNORMAL_CASES[0])
    a, b = inp.x[:16].astype(BF16), inp.w[:1, :, :128].astype(BF16)
    out = _unscaled_pairwise(a, b[0], _ftz)
    assert np.count_nonzero(out) < out.size // 2  # most of it flushed
    gs = np.array([16], np.int32)
    res = assert_gmm_matches(out, a, b, gs, flushes_subnormals=True)
    assert "not checked precisely" in res.metrics["subnormal_range"]
    with pytest.raises(AssertionError, match="bound_ratio"):
        assert_gmm_matches(out, a, b, gs)
    # the IEEE result passes without the declaration
    assert_gmm_matches(_unscaled_pairwise(a, b[0]), a, b, gs)


FTZ_KERNEL_FILE = f"""
import sys
sys.path.insert(0, {str(__import__("pathlib").Path(__file__).parent)!r})
from seeded_bugs.underflow import BUGS

ftz_accumulator = BUGS["bug-ftz-accumulator"].spec.fn
"""


def test_gate_cli_ftz_flag_decides_the_exit_code(tmp_path, monkeypatch):
    """The undeclared flushing kernel fails the subnormal case (exit 1); declared with
    --ftz it passes (exit 0), the results recording the declaration."""
    import json

    from fp8check.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "ftz_kernels.py").write_text(FTZ_KERNEL_FILE)
    base = ["gate", "--no-progress", "--no-isolate", "--suite", "ci", "--layers", "1",
            "--kernel", "ftz_kernels.py:ftz_accumulator", "--contract", "gmm-fp8",
            "--framework", "numpy", "--case", SUBNORMAL_CASES[0].id]
    assert main([*base, "--json", "ieee.json"]) == 1
    assert main([*base, "--ftz", "--json", "ftz.json"]) == 0
    doc = json.loads((tmp_path / "ftz.json").read_text())
    assert doc["environment"]["kernels"]["ftz_kernels.py:ftz_accumulator"][
        "flushes_subnormals"] is True
    (res,) = doc["results"]
    assert "not checked precisely" in res["metrics"]["subnormal_range"]


def test_streamed_totals_apply_the_same_term():
    from fp8check.measures.totals import gmm_metric_totals, metric_totals

    a, b = _tie_operands(np.random.default_rng(8))
    prob = _unscaled_problem(a, b)
    out = _unscaled_pairwise(a, b)
    k = a.shape[1]
    term = prob.underflow.term(ftz=False, u=U)
    for w in (term, term / 2):
        s = metric_totals(out, prob.exact, prob.abs_ab, k, underflow=w)
        ratio = _ratio(out, prob.exact, prob.abs_ab, k, w)
        assert s.bound_ratio_max == np.max(ratio)
        assert s.n_over_bound == np.count_nonzero(ratio > 1)
    assert metric_totals(out, prob.exact, prob.abs_ab, k, underflow=term / 2).n_over_bound \
        == out.size
    # gmm-fp8 streamed: the FTZ DeepGEMM order passes only when declared
    case = SUBNORMAL_CASES[0]
    lq, rq = PROBLEMS.get("gmm-fp8", case)[0].quantized
    one = (QTensor(lq.values[:32], lq.scales[:32], lq.block, lq.fmt, lq.recipe),
           QTensor(rq.values[:1], rq.scales[:1], rq.block, rq.fmt, rq.recipe))
    flushed = _fp8_orders(*one, flush=_ftz)["deepgemm"]
    gs = np.array([32])
    assert gmm_metric_totals(flushed, *one, gs, accum=None).n_over_bound > 0
    assert gmm_metric_totals(flushed, *one, gs, accum=None, ftz=True).n_over_bound == 0
    exact_out = _fp8_orders(*one)["deepgemm"]
    assert gmm_metric_totals(exact_out, *one, gs).n_ref_mismatch == 0


@pytest.mark.parametrize(("flag", "value"), [("--ftz", True), ("--no-ftz", False), (None, None)])
def test_ftz_flag_parses_and_repeats_in_the_repro_command(flag, value):
    import argparse

    from fp8check.commands.gate import options, register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["gate", "--contract", "gmm", "--framework", "jax",
                              *([flag] if flag else [])])
    bare = options(args).bare
    assert bare.ftz is value
    assert bare.declared().get("flushes_subnormals") is value
    assert (flag in bare.arguments()) if flag else not any("ftz" in a
                                                             for a in bare.arguments())


def test_finite_peak_streams_chunks_and_skips_non_finite(monkeypatch):
    """The operands' peak magnitude, a chunk at a time (chunks of 7 here, so the peak, NaN
    and Inf fall in different chunks and at their edges), or from the codes of an fp8
    format whose magnitudes follow its codes (e4m3fn, e5m2; e4m3fnuz, whose NaN is the
    negative zero code, takes the chunks): equal to max |finite v| taken at once, 0.0 for
    an empty or all-NaN operand."""
    import ml_dtypes

    from fp8check.measures import underflow

    monkeypatch.setattr(underflow, "_PEAK_CHUNK", 7)
    rng = np.random.default_rng(5)
    assert underflow._sign_magnitude_order(np.dtype(ml_dtypes.float8_e4m3fnuz)) is None
    for fp8 in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2):
        assert underflow._sign_magnitude_order(np.dtype(fp8)) is not None
    for dtype in (np.float32, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
                  ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fnuz):
        v = (rng.standard_normal((5, 9)) * 20).astype(dtype)
        flat = v.reshape(-1)
        has_inf = np.isinf(np.array(np.inf).astype(dtype))
        flat[6], flat[13] = np.nan, -np.inf if has_inf else np.nan
        flat[14] = -224.0  # the peak, first of the third chunk
        a = np.abs(flat.astype(np.float64))
        want = float(a[np.isfinite(a)].max())
        assert want == 224.0 and underflow._finite_peak(v) == want, dtype
        assert underflow._finite_peak(np.full(10, np.nan).astype(dtype)) == 0.0
        assert underflow._finite_peak(np.zeros((0, 3), dtype)) == 0.0
    assert underflow._finite_peak(np.full(10, np.nan, np.float32)) == 0.0


def test_largest_finite_code_stops_at_the_largest_and_reads_every_chunk_otherwise():
    """The largest finite magnitude code of e4m3fn (limit 127: 0x7F is NaN), over several
    scan chunks and a ragged tail, equals numpy's: placed in the first chunk (the scan
    stops there), in the tail, or absent (every chunk read); NaN codes never count."""
    from fp8check.measures import underflow

    rng = np.random.default_rng(3)
    n = 3 * underflow._CODE_CHUNK + 5
    for where in (0, underflow._CODE_CHUNK - 1, n - 1, None):
        codes = rng.integers(0, 100, n, dtype=np.uint8) | rng.choice([0, 0x80], n).astype(
            np.uint8)
        codes[rng.choice(n, 20)] = 0xFF  # NaN codes, above every finite one
        if where is not None:
            codes[where] = 0xFE  # -448, the largest finite magnitude
        low = codes & 0x7F
        want = int(low[low < 127].max())
        assert underflow._largest_finite_code(codes, 127) == want == (
            126 if where is not None else want), where
    assert underflow._largest_finite_code(np.zeros(0, np.uint8), 127) == 0
