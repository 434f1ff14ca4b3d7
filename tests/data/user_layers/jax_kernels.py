"""A user's JAX kernels for layers 2 and 3, written the plainest way and traceable (layers
2 and 3 run them under jax.jit, group sizes traced): dequantize, then one float32 matmul per
expert kept on that expert's rows (`gmm_fp8`, contract gmm-fp8, f32 output), and the
backward kernels `tgmm` and `dgrad` in bf16-in, float32-out."""

import jax.numpy as jnp


def _row_expert(group_sizes, m):
    # the expert of each row; rows past sum(group_sizes) get G (no expert)
    return jnp.searchsorted(jnp.cumsum(group_sizes), jnp.arange(m), side="right")


def gmm_fp8(lhs_q, lhs_s, rhs_q, rhs_s, group_sizes):
    x = lhs_q.astype(jnp.float32) * jnp.repeat(lhs_s, 128, axis=1)
    w = rhs_q.astype(jnp.float32) * jnp.repeat(jnp.repeat(rhs_s, 128, axis=1), 128, axis=2)
    expert = _row_expert(group_sizes, x.shape[0])
    out = jnp.zeros((x.shape[0], w.shape[2]), jnp.float32)
    for g in range(w.shape[0]):
        out = jnp.where((expert == g)[:, None], x @ w[g], out)
    return out


def tgmm(x, dy, group_sizes):
    expert = _row_expert(group_sizes, x.shape[0])
    x32, dy32 = x.astype(jnp.float32), dy.astype(jnp.float32)
    return jnp.stack([jnp.where((expert == g)[:, None], x32, 0.0).T @ dy32
                      for g in range(group_sizes.shape[0])])


def dgrad(dy, w, group_sizes):
    expert = _row_expert(group_sizes, dy.shape[0])
    dy32, w32 = dy.astype(jnp.float32), w.astype(jnp.float32)
    out = jnp.zeros((dy.shape[0], w.shape[1]), jnp.float32)
    for g in range(w.shape[0]):
        out = jnp.where((expert == g)[:, None], dy32 @ w32[g].T, out)
    return out
