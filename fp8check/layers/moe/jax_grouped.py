"""JAX pieces of a MoE layer built around a user's kernels (`fp8check.layers.moe.user`):
the differentiable grouped matmul made of a forward and two backward kernels, the
`deepgemm` quantizer a gmm-fp8 kernel is fed by, and fp8check's own bf16 grouped matmuls
(the bf16 baseline's forward and the reference backward where the user gives none).

Everything here is traceable: the JAX layer and model run under `jax.grad` / `jax.jit`,
group sizes are traced int32 arrays, so group membership is a mask, never a Python slice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from fp8check.layers.moe.jax_layer import GroupedMatmul

FRAMEWORK = "jax"
BF16 = jnp.bfloat16


def quantize(x: jax.Array, block: tuple[int, int]) -> tuple[jax.Array, jax.Array]:
    """(values e4m3fn, scales f32) of x [..., R, C] with the `deepgemm` recipe: the Pallas
    family's quantizer, bit-exact to `fp8check.references.quantize` (tested in
    tests/test_pallas_backward.py)."""
    from fp8check.kernels.pallas.quantize import quantize_deepgemm

    return quantize_deepgemm(x, block)


def to_bf16(x: jax.Array) -> jax.Array:
    return x.astype(BF16)


def cast_like(x: jax.Array, like: jax.Array) -> jax.Array:
    return x.astype(like.dtype)


def dtype_name(x: Any) -> str | None:
    """"f32" or "bf16" for an array of that dtype, None for anything else."""
    return {jnp.dtype(jnp.float32): "f32", jnp.dtype(BF16): "bf16"}.get(
        getattr(x, "dtype", None))


def _row_groups(group_sizes: jax.Array, m: int) -> jax.Array:
    """The group of each of m rows; rows at or past sum(group_sizes) get G (no group)."""
    return jnp.searchsorted(jnp.cumsum(group_sizes), jnp.arange(m), side="right")


def bf16_gmm(x16: jax.Array, w16: jax.Array, group_sizes: jax.Array) -> jax.Array:
    """[M, N] float32 = x_g @ w[g] per group: bf16 operands, float32 products (exact: two
    8-bit significands) and float32 accumulation.  Rows past the groups are zero."""
    gid = _row_groups(group_sizes, x16.shape[0])
    out = jnp.zeros((x16.shape[0], w16.shape[2]), jnp.float32)
    for g in range(w16.shape[0]):
        full = jnp.dot(x16, w16[g], preferred_element_type=jnp.float32)
        out = jnp.where((gid == g)[:, None], full, out)
    return out


def bf16_dgrad(dy16: jax.Array, w16: jax.Array, group_sizes: jax.Array) -> jax.Array:
    """dX [M, K] float32 = dy_g @ w[g]^T per group, as `bf16_gmm`."""
    return bf16_gmm(dy16, jnp.swapaxes(w16, 1, 2), group_sizes)


def bf16_tgmm(x16: jax.Array, dy16: jax.Array, group_sizes: jax.Array) -> jax.Array:
    """dW [G, K, N] float32 = x_g^T @ dy_g over each group's rows, as `bf16_gmm`."""
    gid = _row_groups(group_sizes, x16.shape[0])
    return jnp.stack([
        jnp.dot(jnp.where((gid == g)[:, None], x16, jnp.zeros_like(x16)).T, dy16,
                preferred_element_type=jnp.float32)
        for g in range(group_sizes.shape[0])])


def bf16_forward(x: jax.Array, w: jax.Array, group_sizes: jax.Array) -> jax.Array:
    """The bf16 baseline's forward: `bf16_gmm` on bf16 copies, rounded once to bf16."""
    return bf16_gmm(to_bf16(x), to_bf16(w), group_sizes).astype(BF16)


Kernel = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]


def differentiable(forward: Kernel, dgrad: Kernel, tgmm: Kernel) -> GroupedMatmul:
    """The grouped matmul (x [M, K], w [G, K, N], group_sizes) -> forward(x, w, group_sizes)
    whose gradients are dX = dgrad(dy, w, gs) and dW = tgmm(x, dy, gs) on bf16 copies of
    x, w and dy (the forward's quantization is the identity for the gradient:
    straight-through), each cast to its operand's dtype."""

    @jax.custom_vjp
    def gmm(x, w, group_sizes):
        return forward(x, w, group_sizes)

    def fwd(x, w, group_sizes):
        return forward(x, w, group_sizes), (x, w, group_sizes)

    def bwd(residuals, dy):
        x, w, group_sizes = residuals
        dy16 = to_bf16(dy)
        dx = dgrad(dy16, to_bf16(w), group_sizes).astype(x.dtype)
        dw = tgmm(to_bf16(x), dy16, group_sizes).astype(w.dtype)
        return dx, dw, None

    gmm.defvjp(fwd, bwd)
    return gmm
