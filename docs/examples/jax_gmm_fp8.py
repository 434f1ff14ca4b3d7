"""gmm-fp8 in JAX (docs/contract.md): dequantize, then per group a masked matmul (no
data-dependent shapes, so it also works under jax.jit)."""

import jax.numpy as jnp

BLOCK = 128


def gmm_fp8(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype=jnp.float32):
    m, k = lhs_q.shape
    n = rhs_q.shape[2]
    lhs = lhs_q.astype(jnp.float32) * jnp.repeat(lhs_scale, BLOCK, axis=1)[:, :k]
    rhs_s = jnp.repeat(jnp.repeat(rhs_scale, BLOCK, axis=1), BLOCK, axis=2)[:, :k, :n]
    rhs = rhs_q.astype(jnp.float32) * rhs_s
    ends = jnp.cumsum(group_sizes)
    rows = jnp.arange(m)[:, None]
    out = jnp.zeros((m, n), jnp.float32)
    for g in range(rhs.shape[0]):
        in_group = (rows >= ends[g] - group_sizes[g]) & (rows < ends[g])
        out = jnp.where(in_group, lhs @ rhs[g], out)
    return out.astype(out_dtype)
