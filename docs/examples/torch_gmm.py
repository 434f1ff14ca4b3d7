"""gmm (bf16 operands) in torch (docs/contract.md): float32 accumulation per group."""

import torch


def gmm(lhs, rhs, group_sizes, out_dtype=torch.float32):
    out = torch.zeros(lhs.shape[0], rhs.shape[2], dtype=torch.float32)
    start = 0
    for g, size in enumerate(group_sizes.tolist()):
        out[start:start + size] = lhs[start:start + size].float() @ rhs[g].float()
        start += size
    return out.to(out_dtype)
