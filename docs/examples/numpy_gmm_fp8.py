"""gmm-fp8 in numpy (docs/contract.md): dequantize both operands by their block scales,
then one float32 matmul per group, rounded once to out_dtype."""

import numpy as np

BLOCK = 128


def gmm_fp8(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype=np.float32):
    m, k = lhs_q.shape
    n = rhs_q.shape[2]
    lhs = lhs_q.astype(np.float32) * np.repeat(lhs_scale, BLOCK, axis=1)[:, :k]
    rhs_s = np.repeat(np.repeat(rhs_scale, BLOCK, axis=1), BLOCK, axis=2)[:, :k, :n]
    rhs = rhs_q.astype(np.float32) * rhs_s
    out = np.zeros((m, n), np.float32)  # rows past sum(group_sizes): never compared
    start = 0
    for g, size in enumerate(group_sizes.tolist()):
        out[start:start + size] = lhs[start:start + size] @ rhs[g]
        start += size
    return out.astype(out_dtype)
