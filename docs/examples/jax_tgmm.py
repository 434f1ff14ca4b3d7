"""tgmm (weight gradient) in JAX (docs/contract.md): dW_g = lhs_g^T @ dy_g over the rows
of group g, in float32.  It takes no out_dtype and returns float32 only, so it is run
with --out-dtypes f32."""

import jax.numpy as jnp


def tgmm(lhs, dy, group_sizes):
    ends = jnp.cumsum(group_sizes)
    rows = jnp.arange(lhs.shape[0])[:, None]
    x, d = lhs.astype(jnp.float32), dy.astype(jnp.float32)
    grads = []
    for g in range(group_sizes.shape[0]):
        in_group = (rows >= ends[g] - group_sizes[g]) & (rows < ends[g])
        grads.append(jnp.where(in_group, x, 0).T @ d)  # rows outside contribute 0
    return jnp.stack(grads)
