"""Pallas forward kernels (gmm_fp8, gmm_bf16) in interpret mode against the exact references."""

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fp8check.inputs.strategies import DISTRIBUTIONS, GROUP_PATTERNS, distributions, group_sizes
from fp8check.kernels.pallas import accum_for, gmm_bf16, gmm_fp8, probe_fidelity
from fp8check.kernels.pallas.gmm import fp8_spec
from fp8check.measures.metrics import bound_ratio
from fp8check.references import QTensor, abs_product, gmm, quantize

FP8 = ml_dtypes.float8_e4m3fn
BF16 = ml_dtypes.bfloat16


def quantized_problem(seed, m, k, n, sizes, dist="normal"):
    rng = np.random.default_rng(seed)
    build = DISTRIBUTIONS[dist]
    lhs = quantize(build(rng, (m, k)), (1, 128))
    rhs = quantize(build(rng, (len(sizes), k, n)), (128, 128))
    return lhs, rhs, np.asarray(sizes, np.int32)


def run_fp8(lhs, rhs, sizes, tiling, out_dtype=np.float32, **kw):
    return np.asarray(gmm_fp8(lhs.values, lhs.scales, rhs.values, rhs.scales, sizes,
                              tiling=tiling, out_dtype=out_dtype, interpret=True, **kw))


def assert_within_bound(out, lhs, rhs, sizes, out_dtype):
    """bound_ratio <= 1 on the rows of groups, and exact zeros on the rows past the sum."""
    total = int(np.sum(sizes))
    exact = gmm(lhs, rhs, sizes, out_dtype=np.float64, accum="exact")
    k = (lhs.values if isinstance(lhs, QTensor) else lhs).shape[1]
    ratio = bound_ratio(out.astype(np.float64)[:total], exact[:total],
                        abs_product(lhs, rhs, sizes)[:total], k, out_dtype=out_dtype)
    assert ratio.max(initial=0.0) <= 1.0, f"worst bound ratio {ratio.max()}"
    assert np.all(out[total:] == 0)


@pytest.mark.parametrize("tiling", [(64, 128, 128), (128, 512, 256), (32, 1024, 128)])
def test_fp8_within_bound_for_subchannel_counts(tiling):
    sizes = [70, 0, 129, 1, 90]  # empty group, straddling row tiles, 30 residual rows
    lhs, rhs, gs = quantized_problem(1, 320, 1024, 256, sizes, "outlier-channels")
    out = run_fp8(lhs, rhs, gs, tiling)
    assert_within_bound(out, lhs, rhs, gs, np.float32)


def test_fp8_whole_k_tile_of_2048():
    lhs, rhs, gs = quantized_problem(2, 96, 2048, 128, [40, 0, 50], "lognormal-rows")
    out = run_fp8(lhs, rhs, gs, (32, 2048, 128), out_dtype=BF16)
    assert_within_bound(out, lhs, rhs, gs, BF16)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=group_sizes(200, 4), dist=distributions(), seed=st.integers(0, 2**31),
       tiling=st.sampled_from([(32, 128, 128), (64, 256, 256), (128, 512, 128)]))
def test_fp8_fuzz_groups_and_distributions(sizes, dist, seed, tiling):
    lhs, rhs, gs = quantized_problem(seed, 200, 512, 256, sizes, dist)
    out = run_fp8(lhs, rhs, gs, tiling, out_dtype=BF16)
    assert_within_bound(out, lhs, rhs, gs, BF16)


def exact_partial_problem(seed, m, k, n, sizes, pow2_scales):
    """FP8 values in [-4, 4]: every 128-wide partial (<= 2048 in size) is exact in f32."""
    rng = np.random.default_rng(seed)
    g = len(sizes)

    def scales(shape):
        if pow2_scales:
            return np.exp2(rng.integers(-6, 7, shape)).astype(np.float32)
        return rng.uniform(0.01, 3.0, shape).astype(np.float32)

    def values(shape):
        return rng.integers(-4, 5, shape).astype(np.float32).astype(FP8)

    lhs = QTensor(values((m, k)), scales((m, k // 128)), (1, 128), "e4m3fn", "deepgemm")
    rhs = QTensor(values((g, k, n)), scales((g, k // 128, n // 128)), (128, 128), "e4m3fn",
                  "deepgemm")
    return lhs, rhs, np.asarray(sizes, np.int32)


@pytest.mark.parametrize("pow2_scales", [True, False])
@pytest.mark.parametrize("tiling", [(32, 128, 128), (64, 512, 256)])
def test_fp8_bit_exact_to_declared_accum(tiling, pow2_scales):
    accum = accum_for(interpret=True)
    assert accum is not None, "interpret mode has no pinned accumulation recipe"
    lhs, rhs, gs = exact_partial_problem(3, 160, 512, 256, [33, 0, 100, 20], pow2_scales)
    for out_dtype in (np.float32, BF16):
        out = run_fp8(lhs, rhs, gs, tiling, out_dtype=out_dtype)
        want = gmm(lhs, rhs, gs, out_dtype=out_dtype, accum=accum)
        np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))


def test_declared_accum_differs_from_the_other_recipes():
    """Non-power-of-two scales separate the recipes, so the bit-exact test can fail."""
    lhs, rhs, gs = exact_partial_problem(4, 64, 512, 128, [64], pow2_scales=False)
    out = run_fp8(lhs, rhs, gs, (64, 512, 128))
    for other in {"deepgemm", "cublas", "tokamax"} - {accum_for(interpret=True)}:
        assert not np.array_equal(out, gmm(lhs, rhs, gs, accum=other)), other


def test_rows_outside_groups_are_not_written():
    lhs, rhs, gs = quantized_problem(5, 200, 256, 256, [5, 0, 60, 70], "normal")
    sentinel = np.full((200, 256), np.nan, np.float32)
    out = run_fp8(lhs, rhs, gs, (64, 128, 128), init_out=jnp.asarray(sentinel))
    total = int(gs.sum())
    assert np.isnan(out[total:]).all()  # every row past the groups keeps the sentinel
    assert np.isfinite(out[:total]).all()  # every row of a group is written
    np.testing.assert_array_equal(out[:total], run_fp8(lhs, rhs, gs, (64, 128, 128))[:total])


def test_nan_in_rows_past_the_groups_does_not_leak():
    lhs, rhs, gs = quantized_problem(6, 96, 256, 128, [30, 20], "normal")
    values = lhs.values.copy()
    values[50:] = np.float32(np.nan)  # rows 50.. belong to no group, share a tile with 30..49
    dirty = QTensor(values, lhs.scales, lhs.block, lhs.fmt, lhs.recipe)
    out = run_fp8(dirty, rhs, gs, (64, 128, 128))
    np.testing.assert_array_equal(out, run_fp8(lhs, rhs, gs, (64, 128, 128)))


def test_fp8_deterministic():
    lhs, rhs, gs = quantized_problem(7, 128, 512, 128, [60, 68], "student-t")
    a, b = (run_fp8(lhs, rhs, gs, (64, 256, 128)) for _ in range(2))
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("tiling", [(32, 128, 128), (64, 512, 256)])
def test_bf16_baseline_within_bound(tiling):
    rng = np.random.default_rng(8)
    gs = GROUP_PATTERNS["residues"](rng, 150, 3)
    lhs = DISTRIBUTIONS["normal"](rng, (150, 512)).astype(BF16)
    rhs = DISTRIBUTIONS["normal"](rng, (3, 512, 256)).astype(BF16)
    out = np.asarray(gmm_bf16(lhs, rhs, gs, tiling=tiling, out_dtype=np.float32, interpret=True))
    assert_within_bound(out, lhs, rhs, gs, np.float32)


@pytest.mark.parametrize("change, match", [
    (lambda a: {**a, "lhs_q": a["lhs_q"].astype(np.float32)}, "lhs_q must have dtype"),
    (lambda a: {**a, "lhs_scale": a["lhs_scale"][:, :1]}, "lhs_scale must be"),
    (lambda a: {**a, "rhs_scale": a["rhs_scale"][:, :1]}, "rhs_scale must be"),
    (lambda a: {**a, "group_sizes": np.array([40, 40], np.int32)}, "exceeds M"),
    (lambda a: {**a, "group_sizes": np.array([-1, 2], np.int32)}, "non-negative"),
    (lambda a: {**a, "group_sizes": np.array([1], np.int32)}, "shape"),
])
def test_bad_input_raises(change, match):
    lhs, rhs, gs = quantized_problem(9, 64, 256, 128, [30, 30])
    args = {"lhs_q": lhs.values, "lhs_scale": lhs.scales, "rhs_q": rhs.values,
            "rhs_scale": rhs.scales, "group_sizes": gs}
    a = change(args)
    with pytest.raises(ValueError, match=match):
        gmm_fp8(a["lhs_q"], a["lhs_scale"], a["rhs_q"], a["rhs_scale"], a["group_sizes"],
                interpret=True)


def test_interpreter_fidelity_record():
    record = probe_fidelity()
    assert record.ok, record.to_dict()
    assert record.accum in ("tokamax", "cublas")
    spec = fp8_spec("interpret")
    assert spec.matmul_claims.accum == record.accum and spec.contract == "gmm-fp8"
