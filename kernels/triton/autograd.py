"""Differentiable grouped linears y = x @ W_g per group: `grouped_linear_fp8` (FP8
forward) and `grouped_linear_bf16` (bf16 forward), both with the bf16 backward.

FP8 forward: x quantized (1,128) and W (128,128) per expert with the deepgemm recipe
(`quantize_fp8`), then the padding-free `gmm_fp8` (bf16 out).  bf16 forward: there is no
bf16 forward Triton kernel, so it runs the `dgrad` kernel (dY W^T per group) on W^T, which
is the same grouped product with bf16 operands and float32 accumulation.
Backward ("zero backward quantization"): dX = `dgrad`(dY, W) and dW = `tgmm`(X, dY) on bf16
copies of x, W and dY, float32 accumulation.  Rows at or past sum(group_sizes) give y = 0
and dX = 0.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._common import QBLOCK
from .backward import dgrad, tgmm
from .gmm import gmm_fp8
from .quantize import quantize_fp8

Forward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
                   torch.Tensor]


def _fp8_forward(x, w, x16, w16, group_sizes) -> torch.Tensor:
    xq, xs = quantize_fp8(x, (1, QBLOCK))
    wq, ws = quantize_fp8(w, (QBLOCK, QBLOCK))
    y = torch.zeros((x.shape[0], w.shape[2]), dtype=torch.bfloat16, device=x.device)
    return gmm_fp8(xq, xs, wq, ws, group_sizes, out=y)


def _bf16_forward(x, w, x16, w16, group_sizes) -> torch.Tensor:
    return dgrad(x16, w16.transpose(1, 2).contiguous(), group_sizes)


class GroupedLinear(torch.autograd.Function):
    """The autograd.Function behind both: `forward_fn` is the forward product, the backward
    is the bf16 one (group_sizes and forward_fn get no gradient)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, group_sizes: torch.Tensor,
                forward_fn: Forward):
        x16, w16 = x.to(torch.bfloat16).contiguous(), w.to(torch.bfloat16).contiguous()
        y = forward_fn(x, w, x16, w16, group_sizes)
        ctx.save_for_backward(x16, w16, group_sizes)
        ctx.dtypes = (x.dtype, w.dtype)
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        x16, w16, group_sizes = ctx.saved_tensors
        dy16 = dy.to(torch.bfloat16).contiguous()
        dx = dw = None
        if ctx.needs_input_grad[0]:
            dx = dgrad(dy16, w16, group_sizes, out_dtype=torch.float32).to(ctx.dtypes[0])
        if ctx.needs_input_grad[1]:
            dw = tgmm(x16, dy16, group_sizes, out_dtype=torch.float32).to(ctx.dtypes[1])
        return dx, dw, None, None


def _apply(x: torch.Tensor, w: torch.Tensor, group_sizes: torch.Tensor,
           forward_fn: Forward) -> torch.Tensor:
    if x.ndim != 2 or w.ndim != 3 or x.shape[1] != w.shape[1]:
        raise ValueError(f"x must be [M,K] and w [G,K,N] with matching K, got "
                         f"{tuple(x.shape)}, {tuple(w.shape)}")
    return GroupedLinear.apply(x, w, group_sizes, forward_fn)


def grouped_linear_fp8(x: torch.Tensor, w: torch.Tensor,
                       group_sizes: torch.Tensor) -> torch.Tensor:
    """y [M,N] bf16 = x [M,K] @ w[g] [K,N] for the rows of each group g (x, w float32 or
    bf16; K, N multiples of 128), FP8 forward.  Differentiable in x and w."""
    return _apply(x, w, group_sizes, _fp8_forward)


def grouped_linear_bf16(x: torch.Tensor, w: torch.Tensor,
                        group_sizes: torch.Tensor) -> torch.Tensor:
    """The bf16 twin of `grouped_linear_fp8`: bf16 forward and backward."""
    return _apply(x, w, group_sizes, _bf16_forward)
