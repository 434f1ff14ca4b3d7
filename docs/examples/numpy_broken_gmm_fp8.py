"""A broken gmm-fp8 (docs/contract.md, "What a failure looks like"): every row of a group
uses the scales of the group's first row, a per-group instead of per-token lhs scale."""

import numpy as np

BLOCK = 128


def gmm_fp8(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype=np.float32):
    m, k = lhs_q.shape
    n = rhs_q.shape[2]
    rhs_s = np.repeat(np.repeat(rhs_scale, BLOCK, axis=1), BLOCK, axis=2)[:, :k, :n]
    rhs = rhs_q.astype(np.float32) * rhs_s
    out = np.zeros((m, n), np.float32)
    start = 0
    for g, size in enumerate(group_sizes.tolist()):
        rows = slice(start, start + size)
        first = np.repeat(lhs_scale[start:start + 1], BLOCK, axis=1)[:, :k]  # the bug
        out[rows] = (lhs_q[rows].astype(np.float32) * first) @ rhs[g]
        start += size
    return out.astype(out_dtype)
