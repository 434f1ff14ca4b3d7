"""gmm-fp8 in torch (docs/contract.md): the same dequantize-and-matmul on torch tensors
(fp8 arrives as torch.float8_e4m3fn, out_dtype as torch.float32 or torch.bfloat16)."""

import torch

BLOCK = 128


def gmm_fp8(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype=torch.float32):
    m, k = lhs_q.shape
    n = rhs_q.shape[2]
    lhs = lhs_q.float() * lhs_scale.repeat_interleave(BLOCK, dim=1)[:, :k]
    rhs_s = rhs_scale.repeat_interleave(BLOCK, dim=1).repeat_interleave(BLOCK, dim=2)
    rhs = rhs_q.float() * rhs_s[:, :k, :n]
    out = torch.zeros(m, n, dtype=torch.float32)
    start = 0
    for g, size in enumerate(group_sizes.tolist()):
        out[start:start + size] = lhs[start:start + size] @ rhs[g]
        start += size
    return out.to(out_dtype)
