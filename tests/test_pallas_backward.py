"""Pallas backward kernels (tgmm, dgrad), the jnp quantizer and the custom_vjp, interpret mode."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fp8check.inputs.strategies import DISTRIBUTIONS, distributions, group_sizes
from fp8check.kernels.pallas import dgrad, gmm_fp8, gmm_fp8_train, quantize_deepgemm, tgmm
from fp8check.measures.metrics import bound_ratio
from fp8check.references import dgrad as ref_dgrad
from fp8check.references import quantize
from fp8check.references import tgmm as ref_tgmm

BF16 = ml_dtypes.bfloat16


def bf16_arrays(seed, *shapes, dist="normal"):
    rng = np.random.default_rng(seed)
    return [DISTRIBUTIONS[dist](rng, s).astype(BF16) for s in shapes]


def group_rows(sizes):
    offs = np.concatenate([[0], np.cumsum(sizes)])
    return [slice(offs[g], offs[g + 1]) for g in range(len(sizes))]


def abs_tgmm(lhs, dy, sizes):
    a, d = np.abs(lhs.astype(np.float64)), np.abs(dy.astype(np.float64))
    return np.stack([a[r].T @ d[r] for r in group_rows(sizes)])


def abs_dgrad(dy, rhs, sizes):
    out = np.zeros((dy.shape[0], rhs.shape[1]))
    for g, r in enumerate(group_rows(sizes)):
        out[r] = np.abs(dy[r].astype(np.float64)) @ np.abs(rhs[g].astype(np.float64)).T
    return out


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=group_sizes(150, 4), dist=distributions(), seed=st.integers(0, 2**31),
       tiling=st.sampled_from([(16, 128, 128), (64, 256, 128), (128, 128, 256)]))
def test_tgmm_within_bound_of_float64(sizes, dist, seed, tiling):
    lhs, dy = bf16_arrays(seed, (150, 256), (150, 256), dist=dist)
    out = np.asarray(tgmm(lhs, dy, sizes, tiling=tiling, interpret=True))
    exact = ref_tgmm(lhs, dy, sizes, out_dtype=np.float64)
    # The reduction runs over the group's rows: at most 150 terms, no scales.
    ratio = bound_ratio(out.astype(np.float64), exact, abs_tgmm(lhs, dy, sizes), 150, n=152)
    assert ratio.max() <= 1.0
    for g in np.flatnonzero(np.asarray(sizes) == 0):
        assert np.all(out[g] == 0)


def test_tgmm_no_row_leaks_into_another_group():
    sizes = np.array([7, 0, 50, 3], np.int32)  # 60 of 96 rows: the rest belong to no group
    lhs, dy = bf16_arrays(1, (96, 128), (96, 128))
    clean = np.asarray(tgmm(lhs, dy, sizes, tiling=(32, 128, 128), interpret=True))
    for g, rows in enumerate(group_rows(sizes)):
        poisoned_lhs, poisoned_dy = lhs.copy(), dy.copy()
        keep = np.zeros(96, bool)
        keep[rows] = True
        poisoned_lhs[~keep], poisoned_dy[~keep] = np.nan, np.nan
        out = np.asarray(tgmm(poisoned_lhs, poisoned_dy, sizes, tiling=(32, 128, 128),
                              interpret=True))
        np.testing.assert_array_equal(out[g], clean[g])


@pytest.mark.parametrize("tiling", [(16, 128, 128), (64, 256, 256)])
def test_dgrad_within_bound_of_float64(tiling):
    sizes = np.array([40, 0, 77, 13], np.int32)
    dy, rhs = bf16_arrays(2, (150, 256), (4, 256, 256), dist="outlier-channels")
    out = np.asarray(dgrad(dy, rhs, sizes, tiling=tiling, out_dtype=np.float32, interpret=True))
    total = int(sizes.sum())
    exact = ref_dgrad(dy, rhs, sizes, out_dtype=np.float64)
    ratio = bound_ratio(out[:total].astype(np.float64), exact[:total],
                        abs_dgrad(dy, rhs, sizes)[:total], 256, n=258)
    assert ratio.max() <= 1.0
    assert np.all(out[total:] == 0)


@pytest.mark.parametrize("dist", ["normal", "zero-blocks", "near-max", "outlier-channels",
                                  "many-scales", "fp8-ties", "quantizer-boundary"])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_jnp_quantizer_bit_exact_to_reference(dist, dtype):
    rng = np.random.default_rng(3)
    # whole blocks, then partial last blocks (K % 128 != 0; 128x128 rows and columns)
    for shape, block in (((64, 384), (1, 128)), ((2, 256, 384), (128, 128)),
                         ((33, 200), (1, 128)), ((2, 200, 136), (128, 128))):
        x = DISTRIBUTIONS[dist](rng, shape).astype(dtype)
        q, s = jax.jit(quantize_deepgemm, static_argnums=1)(x, block)
        ref = quantize(x, block, "deepgemm")
        np.testing.assert_array_equal(np.asarray(q).view(np.uint8), ref.values.view(np.uint8))
        np.testing.assert_array_equal(np.asarray(s).view(np.uint32), ref.scales.view(np.uint32))


def test_jnp_quantizer_partial_block_ignores_what_lies_past_it():
    # a tail block of 72 columns whose amax is 1: its scale is RN(1/448) whatever values
    # the same row holds in earlier blocks (a padded amax reading them would be larger)
    x = np.full((4, 200), 1000.0, np.float32)
    x[:, 128:] = 1.0
    q, s = quantize_deepgemm(x, (1, 128))
    assert np.asarray(s).shape == (4, 2) and np.asarray(q).shape == (4, 200)
    np.testing.assert_array_equal(np.asarray(s)[:, 1], np.float32(1) / np.float32(448))


def dense_gmm(lhs, rhs, sizes):
    """The same function computed densely (per-row expert weights), f32 math."""
    expert = np.repeat(np.arange(len(sizes)), sizes)
    expert = np.concatenate([expert, np.full(lhs.shape[0] - expert.size, -1)])
    onehot = jnp.asarray(expert[:, None] == np.arange(len(sizes))[None], jnp.float32)
    per_row = jnp.einsum("mg,gkn->mkn", onehot, rhs.astype(jnp.float32))
    return jnp.einsum("mk,mkn->mn", lhs.astype(jnp.float32), per_row,
                      precision=jax.lax.Precision.HIGHEST)


def test_train_forward_is_gmm_fp8_on_reference_quantized_operands():
    sizes = np.array([20, 0, 60], np.int32)
    lhs, rhs = bf16_arrays(4, (96, 256), (3, 256, 128))
    out = np.asarray(gmm_fp8_train(lhs, rhs, sizes, interpret=True))
    lq, rq = quantize(lhs, (1, 128)), quantize(rhs, (128, 128))
    want = np.asarray(gmm_fp8(lq.values, lq.scales, rq.values, rq.scales, sizes,
                              out_dtype=jnp.bfloat16, interpret=True))
    np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))


def test_train_gradients_match_dense_jax_grad():
    sizes = np.array([20, 0, 60, 10], np.int32)  # 6 rows past the groups
    lhs, rhs, cot = bf16_arrays(5, (96, 256), (4, 256, 128), (96, 128))
    tilings = ((32, 128, 128), (32, 128, 128), (32, 128, 128))

    def loss(fn):
        return lambda a, b: jnp.sum(fn(a, b).astype(jnp.float32) * cot.astype(jnp.float32))

    kernel_fn = jax.jit(jax.grad(loss(lambda a, b: gmm_fp8_train(
        a, b, sizes, tilings=tilings, interpret=True)), argnums=(0, 1)))
    d_lhs, d_rhs = kernel_fn(jnp.asarray(lhs), jnp.asarray(rhs))
    dense_lhs, dense_rhs = jax.grad(loss(lambda a, b: dense_gmm(a, b, sizes)), argnums=(0, 1))(
        jnp.asarray(lhs), jnp.asarray(rhs))
    assert d_lhs.dtype == jnp.bfloat16 and d_rhs.dtype == jnp.bfloat16
    # "Match" means: the kernel's and the dense function's gradients are both within the
    # f32-accumulation error bound of the exact gradient (so they agree to twice the bound;
    # an ulp count would not do: under cancellation two valid sums differ by many ulps).
    checks = (
        (d_lhs, dense_lhs, ref_dgrad(cot, rhs, sizes, out_dtype=np.float64),
         abs_dgrad(cot, rhs, sizes), 128),
        (d_rhs, dense_rhs, ref_tgmm(lhs, cot, sizes, out_dtype=np.float64),
         abs_tgmm(lhs, cot, sizes), 96),
    )
    for got, dense, exact, abs_ab, k in checks:
        for grad in (got, dense):
            ratio = bound_ratio(np.asarray(grad, np.float64), exact, abs_ab, k, out_dtype=BF16,
                                n=k + 2)
            assert ratio.max() <= 1.0
    assert np.all(np.asarray(d_lhs)[90:] == 0)  # rows of no group get no gradient
    assert np.all(np.asarray(d_rhs)[1] == 0)  # the empty expert gets no gradient
