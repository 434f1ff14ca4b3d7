"""dgrad (input gradient) in numpy, and the `gmm` view that layer 1 checks it under
(docs/contract.md): dX_g = dY_g @ W_g^T, so dgrad(lhs, rhs^T) is gmm(lhs, rhs)."""

import numpy as np


def dgrad(dy, w, group_sizes, out_dtype=np.float32):
    """dy [M, N] bf16, w [G, K, N] bf16 -> dX [M, K]."""
    out = np.zeros((dy.shape[0], w.shape[1]), np.float32)
    start = 0
    for g, size in enumerate(group_sizes.tolist()):
        out[start:start + size] = dy[start:start + size].astype(np.float32) @ w[g].astype(
            np.float32).T
        start += size
    return out.astype(out_dtype)


def dgrad_as_gmm(lhs, rhs, group_sizes, out_dtype=np.float32):
    """The `gmm` contract's call: W = rhs transposed to [G, N, K]."""
    return dgrad(lhs, rhs.transpose(0, 2, 1), group_sizes, out_dtype)
