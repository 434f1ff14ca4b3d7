"""A seeded backward bug that layers 1 and 2 pass and layer 3 catches: the weight gradient
of both expert GMMs is truncated (rounded toward -inf) onto a fixed-point grid of 2^-10,
as a deterministic fixed-point reduction with a fixed scale would do if it truncated
instead of rounding.

Why only training sees it: the error is absolute, at most 2^-10 and always negative.
Layer 1 never runs it (the kernels are the correct ones; the bug is in the custom_vjp
wiring).  Layer 2 feeds unit-scale cotangents, so dW is O(1-10) and the truncation is a
relative 1e-4-1e-3: >= 41 dB straight-through SQNR on every tensor and expert of the ci
scenarios, above its 40 dB floor.  In training the loss is a mean over 64 tokens and dW
is ~1e-3, so the same truncation is a bias of ~half the gradient, of one sign on every
element: AdamW drifts every expert weight downward, the loss falls behind bf16 more
and more (AUC gap ~1.7%, final-loss gap ~3% at 60 steps), and the gradient SNR against
f32 sits near 11 dB instead of ~28.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fp8check.kernels.pallas import dgrad, gmm_fp8_train, tgmm
from fp8check.layers.moe.jax_layer import GroupedMatmul
from fp8check.references.moe import MoEInputs, MoEOutputs

GRID_LOG2 = 10


def _floor_to_grid(x: jax.Array) -> jax.Array:
    scale = 2.0 ** GRID_LOG2
    return jnp.floor(x.astype(jnp.float32) * scale) / scale


@jax.custom_vjp
def truncated_wgrad_gmm(lhs, rhs, group_sizes):
    """`gmm_fp8_train` with the fixed-point-truncated weight gradient (module docstring)."""
    return gmm_fp8_train(lhs, rhs, group_sizes)


def _fwd(lhs, rhs, group_sizes):
    return gmm_fp8_train(lhs, rhs, group_sizes), (lhs, rhs, group_sizes)


def _bwd(res, dy):
    lhs, rhs, group_sizes = res
    dy16 = dy.astype(jnp.bfloat16)
    d_lhs = dgrad(dy16, rhs.astype(jnp.bfloat16), group_sizes, out_dtype=lhs.dtype)
    d_rhs = tgmm(lhs.astype(jnp.bfloat16), dy16, group_sizes, out_dtype=jnp.float32)
    return d_lhs, _floor_to_grid(d_rhs).astype(rhs.dtype), None


truncated_wgrad_gmm.defvjp(_fwd, _bwd)
BUG: GroupedMatmul = truncated_wgrad_gmm


def layer2_impl(inp: MoEInputs, variant: str) -> MoEOutputs:
    """A `layer_impl` for `run_layer2`: the Pallas MoE layer with the bug inside."""
    from fp8check.layers.moe.jax_layer import run_moe

    return run_moe(inp, BUG)


def model_impl(cfg, variant: str):
    """A `model_impl` for `iter_layer3`: the bug in the FP8 model, bf16 left correct."""
    from fp8check.layers.moe import family_matmuls
    from fp8check.layers.training.jax_model import make_grad_fn

    return make_grad_fn(cfg, BUG if variant == "fp8" else family_matmuls("pallas").variant(
        variant))
