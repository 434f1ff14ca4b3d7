"""The MoE layer in JAX (the math of `fp8check.references.moe`) around any differentiable
grouped matmul: the Pallas family's (`fp8check.layers.moe.matmuls`) or a user's JAX kernels
(`fp8check.layers.moe.user`).

Precision contract (what the float64 straight-through reference mirrors): router logits,
softmax and combine weights in float32; x, x_perm, both GMM outputs and the SiLU-GLU
activation stored in bf16; the combine accumulates in float32 and `out` is float32.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from fp8check.references.moe import MoEInputs, MoEOutputs

# A differentiable grouped matmul: (lhs [M, K], rhs [G, K, N], group_sizes [G]) -> [M, N].
GroupedMatmul = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]


def moe_layer(x, w_router, router_bias, wi, wo, *, top_k: int,
              gmm: GroupedMatmul) -> tuple[jax.Array, jax.Array]:
    """(out [T, D] float32, group_sizes [E] int32) of the MoE layer on x [T, D] bf16.

    w_router [D, E], router_bias [E] (constant), wi [E, D, 2F], wo [E, F, D] float32;
    `gmm` runs both expert matmuls.  Differentiable in x and the three weights.
    """
    t = x.shape[0]
    num_experts = w_router.shape[1]
    logits = x.astype(jnp.float32) @ w_router + jax.lax.stop_gradient(router_bias)
    probs = jax.nn.softmax(logits, axis=1)
    p_sel, experts = jax.lax.top_k(probs, top_k)
    weights = p_sel / jnp.sum(p_sel, axis=1, keepdims=True)
    flat = experts.reshape(-1)
    # Stable sort: pairs of one expert stay in (token, slot) order, as in the reference.
    order = jnp.argsort(flat, stable=True)
    group_sizes = jnp.bincount(flat, length=num_experts).astype(jnp.int32)
    x_perm = x[order // top_k]
    h = gmm(x_perm, wi, group_sizes)
    f = wi.shape[2] // 2
    act = (jax.nn.silu(h[:, :f].astype(jnp.float32)) * h[:, f:].astype(jnp.float32)).astype(
        jnp.bfloat16)
    y_perm = gmm(act, wo, group_sizes)
    inverse = jnp.argsort(order)
    y_pairs = y_perm[inverse].reshape(t, top_k, -1).astype(jnp.float32)
    out = jnp.einsum("tk,tkd->td", weights, y_pairs)
    return out, group_sizes


def run_moe(inp: MoEInputs, gmm: GroupedMatmul) -> MoEOutputs:
    """Forward and the gradients of sum(out * dy) of `moe_layer` on `inp`, as numpy."""
    x = jnp.asarray(inp.x, jnp.bfloat16)
    params = (jnp.asarray(inp.w_router), jnp.asarray(inp.wi), jnp.asarray(inp.wo))
    bias, dy = jnp.asarray(inp.router_bias), jnp.asarray(inp.dy)

    def loss(x, w_router, wi, wo):
        out, gs = moe_layer(x, w_router, bias, wi, wo, top_k=inp.top_k, gmm=gmm)
        return jnp.sum(out * dy), (out, gs)

    grads, (out, gs) = jax.grad(loss, argnums=(0, 1, 2, 3), has_aux=True)(x, *params)
    dx, d_router, d_wi, d_wo = (np.asarray(g.astype(jnp.float32)) for g in grads)
    return MoEOutputs(out=np.asarray(out), dx=dx, d_router=d_router, d_wi=d_wi, d_wo=d_wo,
                      group_sizes=np.asarray(gs, np.int32))

