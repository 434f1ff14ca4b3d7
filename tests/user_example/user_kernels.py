"""A user's own FP8 blockwise grouped matmul (numpy), as it would sit in their repo.

gmm_fp8 follows the `gmm-fp8` contract: lhs_q [M,K] e4m3fn with per-token 1x128 scales,
rhs_q [G,K,N] e4m3fn with 128x128 scales per expert, group sizes [G]; per group and
128-wide K block a float32 partial, scaled and added to a float32 accumulator.
"""

import ml_dtypes
import numpy as np

BLOCK = 128


def gmm_fp8(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype=np.float32):
    a, b = lhs_q.astype(np.float32), rhs_q.astype(np.float32)
    m, k = a.shape
    n = b.shape[2]
    out = np.zeros((m, n), np.float32)
    start = 0
    for g, size in enumerate(np.asarray(group_sizes).tolist()):
        rows = slice(start, start + size)
        acc = np.zeros((size, n), np.float32)
        for kb in range(k // BLOCK):
            cols = slice(kb * BLOCK, (kb + 1) * BLOCK)
            partial = a[rows, cols] @ b[g, cols]
            scale = lhs_scale[rows, kb][:, None] * np.repeat(rhs_scale[g, kb], BLOCK)[None, :n]
            acc += scale * partial
        out[rows] = acc
        start += size
    return out.astype(out_dtype)


def quantize_1x128(x):
    """DeepGEMM recipe: s = RN(amax / 448) with amax >= 1e-4, q = satfinite(x * RN(1/s))."""
    blocks = x.astype(np.float32).reshape(x.shape[0], -1, BLOCK)
    amax = np.maximum(np.abs(blocks).max(axis=2), np.float32(1e-4))
    scale = (amax / np.float32(448.0)).astype(np.float32)
    inv = (np.float32(1.0) / scale).astype(np.float32)
    q = np.clip(blocks * inv[:, :, None], -448.0, 448.0).astype(ml_dtypes.float8_e4m3fn)
    return q.reshape(x.shape), scale
