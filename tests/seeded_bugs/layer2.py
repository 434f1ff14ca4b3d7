"""Seeded backward / wiring bugs of the MoE layer that layer 1 cannot see: the Pallas
kernels themselves are the correct ones (they pass layer 1); the bug is in how the
layer's custom_vjp wires them, which only a layer-level gradient check exercises.

Each bug is a drop-in for `gmm_fp8_train` (correct FP8 forward, buggy bf16 backward), so
`run_moe(inp, BUGS[name])` is the whole layer with the bug inside.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fp8check.kernels.pallas import dgrad, gmm_fp8_train, quantize_deepgemm, tgmm
from fp8check.layers.moe.jax_layer import GroupedMatmul, run_moe

from .layer2_table import bug_table, layer_running


def _leaky_sizes(group_sizes):
    """Every group boundary moved one row down: group g's reduction also takes the first
    row of the next group (an off-by-one in the end offset of each group)."""
    ends = jnp.cumsum(group_sizes)
    total = ends[-1]
    leaky = jnp.minimum(ends + 1, total).at[-1].set(total)
    return jnp.diff(leaky, prepend=0).astype(jnp.int32)


def _dgrad_ok(dy16, rhs16, gs):
    return dgrad(dy16, rhs16, gs, out_dtype=jnp.bfloat16)


def _dgrad_transposed(dy16, rhs16, gs):
    # dX = dY @ W_g instead of dY @ W_g^T: only type-checks for a square W_g (wo with
    # d_ff == d_model), which is exactly how it slips through.
    if rhs16.shape[1] == rhs16.shape[2]:
        rhs16 = jnp.swapaxes(rhs16, 1, 2)
    return _dgrad_ok(dy16, rhs16, gs)


def _tgmm_ok(lhs16, dy16, gs):
    return tgmm(lhs16, dy16, gs, out_dtype=jnp.float32)


def _tgmm_leak(lhs16, dy16, gs):
    return _tgmm_ok(lhs16, dy16, _leaky_sizes(gs))


def _tgmm_rolled(lhs16, dy16, gs):
    # Expert g's weight gradient lands on expert g+1 (an expert index off by one).
    return jnp.roll(_tgmm_ok(lhs16, dy16, gs), 1, axis=0)


def _dequantized(x, block):
    q, s = quantize_deepgemm(x, block)
    for axis, b in enumerate(block, start=x.ndim - 2):
        s = jnp.repeat(s, b, axis=axis)
    return (q.astype(jnp.float32) * s).astype(x.dtype)


def _buggy_gmm(dgrad_fn, tgmm_fn, *, quantized_residuals: bool = False) -> GroupedMatmul:
    @jax.custom_vjp
    def gmm(lhs, rhs, gs):
        return gmm_fp8_train(lhs, rhs, gs)

    def fwd(lhs, rhs, gs):
        if quantized_residuals:
            # Saves the FP8 operands for the backward instead of the bf16 originals: the
            # "zero backward quantization" the layer claims is silently not what it runs.
            return gmm_fp8_train(lhs, rhs, gs), (_dequantized(lhs, (1, 128)),
                                                 _dequantized(rhs, (128, 128)), gs)
        return gmm_fp8_train(lhs, rhs, gs), (lhs, rhs, gs)

    def bwd(res, dy):
        lhs, rhs, gs = res
        dy16 = dy.astype(jnp.bfloat16)
        d_lhs = dgrad_fn(dy16, rhs.astype(jnp.bfloat16), gs).astype(lhs.dtype)
        d_rhs = tgmm_fn(lhs.astype(jnp.bfloat16), dy16, gs).astype(rhs.dtype)
        return d_lhs, d_rhs, None

    gmm.defvjp(fwd, bwd)
    return gmm


BUGS, CORRECT = bug_table(_buggy_gmm, _dgrad_ok, _dgrad_transposed, _tgmm_ok, _tgmm_leak,
                          _tgmm_rolled)


def layer_with(gmm: GroupedMatmul):
    """A `layer_impl` for `run_layer2` running this family's MoE layer with `gmm`."""
    return layer_running(run_moe, gmm)
