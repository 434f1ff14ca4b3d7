"""A user's torch kernels for layers 2 and 3, written the plainest way: dequantize, then a
float32 matmul per group (`gmm_fp8`, contract gmm-fp8, f32 output; `gmm_bf16`, contract
gmm, the same on bf16 operands), and the backward kernels `tgmm` and `dgrad` in bf16-in,
float32-out.  `dgrad_wrong_expert` is a seeded bug: every group's input gradient uses
expert 0's weight."""

import torch


def _groups(group_sizes):
    start = 0
    for g, n in enumerate(group_sizes.tolist()):
        yield g, start, start + n
        start += n


def gmm_fp8(lhs_q, lhs_s, rhs_q, rhs_s, group_sizes):
    x = lhs_q.float() * lhs_s.repeat_interleave(128, dim=1)
    w = rhs_q.float() * rhs_s.repeat_interleave(128, dim=1).repeat_interleave(128, dim=2)
    out = torch.zeros(x.shape[0], w.shape[2])
    for g, lo, hi in _groups(group_sizes):
        out[lo:hi] = x[lo:hi] @ w[g]
    return out


def gmm_bf16(lhs, rhs, group_sizes):
    out = torch.zeros(lhs.shape[0], rhs.shape[2])
    for g, lo, hi in _groups(group_sizes):
        out[lo:hi] = lhs[lo:hi].float() @ rhs[g].float()
    return out


def tgmm(x, dy, group_sizes):
    out = torch.zeros(group_sizes.shape[0], x.shape[1], dy.shape[1])
    for g, lo, hi in _groups(group_sizes):
        out[g] = x[lo:hi].float().T @ dy[lo:hi].float()
    return out


def dgrad(dy, w, group_sizes):
    out = torch.zeros(dy.shape[0], w.shape[1])
    for g, lo, hi in _groups(group_sizes):
        out[lo:hi] = dy[lo:hi].float() @ w[g].float().T
    return out


def dgrad_wrong_expert(dy, w, group_sizes):
    out = torch.zeros(dy.shape[0], w.shape[1])
    for _, lo, hi in _groups(group_sizes):
        out[lo:hi] = dy[lo:hi].float() @ w[0].float().T
    return out
