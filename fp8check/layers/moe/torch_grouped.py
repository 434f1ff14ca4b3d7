"""torch pieces of a MoE layer built around a user's kernels (`fp8check.layers.moe.user`):
the differentiable grouped matmul made of a forward and two backward kernels, the
`deepgemm` quantizer a gmm-fp8 kernel is fed by, and fp8check's own bf16 grouped matmuls
(the bf16 baseline's forward and the reference backward where the user gives none).

Tensors are CPU tensors and group sizes concrete, so groups are row slices.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fp8check.layers.moe.torch_layer import GroupedMatmul

FRAMEWORK = "torch"
E4M3_MAX = 448.0
AMAX_FLOOR = 1e-4  # rounded to float32(1e-4) by the float32 clamp, as in the reference


def quantize(x: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(values float8_e4m3fn, scales f32 [..., R/bR, C/bC]) of x [..., R, C] (f32 or bf16;
    the block divides R and C) with the `deepgemm` recipe.

    Bit-exact to `fp8check.references.quantize(x, block, "deepgemm")` on finite x: each step
    is the recipe's own float32 operation, correctly rounded on the CPU (IEEE division and
    multiplication): amax = max |x| over the block (exact), s = RN(max(amax, 1e-4) / 448),
    m = RN(1 / s), RN(x * m), a clamp to +-448 (exact; the reference's satfinite), then the
    cast to e4m3fn, which torch rounds to nearest even.  Tested bit for bit against the
    reference (tests/test_layers_user_kernels.py)."""
    x32 = x.float()
    *lead, r, c = x32.shape
    br, bc = block
    blocks = x32.reshape(*lead, r // br, br, c // bc, bc)
    amax = blocks.abs().amax(dim=(-3, -1))
    scale = torch.clamp(amax, min=AMAX_FLOOR) / E4M3_MAX
    inv = 1.0 / scale
    scaled = blocks * inv[..., :, None, :, None]
    values = torch.clamp(scaled, -E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return values.reshape(x.shape), scale


def to_bf16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).contiguous()


def cast_like(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return x.to(like.dtype)


def dtype_name(x: Any) -> str | None:
    """"f32" or "bf16" for a tensor of that dtype, None for anything else."""
    if not isinstance(x, torch.Tensor):
        return None
    return {torch.float32: "f32", torch.bfloat16: "bf16"}.get(x.dtype)


def _bounds(group_sizes: torch.Tensor) -> list[tuple[int, int]]:
    ends = torch.cumsum(group_sizes.to(torch.int64), 0).tolist()
    return [(e - int(s), e) for s, e in zip(group_sizes.tolist(), ends, strict=True)]


def bf16_gmm(x16: torch.Tensor, w16: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    """[M, N] float32 = x_g @ w[g] per group: bf16 operands, float32 products (exact: two
    8-bit significands) and float32 accumulation.  Rows past the groups are zero."""
    out = torch.zeros((x16.shape[0], w16.shape[2]), dtype=torch.float32)
    for g, (lo, hi) in enumerate(_bounds(group_sizes)):
        out[lo:hi] = x16[lo:hi].float() @ w16[g].float()
    return out


def bf16_dgrad(dy16: torch.Tensor, w16: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    """dX [M, K] float32 = dy_g @ w[g]^T per group, as `bf16_gmm`."""
    return bf16_gmm(dy16, w16.transpose(1, 2), group_sizes)


def bf16_tgmm(x16: torch.Tensor, dy16: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    """dW [G, K, N] float32 = x_g^T @ dy_g over each group's rows, as `bf16_gmm`."""
    out = torch.zeros((group_sizes.shape[0], x16.shape[1], dy16.shape[1]))
    for g, (lo, hi) in enumerate(_bounds(group_sizes)):
        out[g] = x16[lo:hi].float().T @ dy16[lo:hi].float()
    return out


def bf16_forward(x: torch.Tensor, w: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    """The bf16 baseline's forward: `bf16_gmm` on bf16 copies, rounded once to bf16."""
    return bf16_gmm(to_bf16(x), to_bf16(w), group_sizes).to(torch.bfloat16)


Kernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def differentiable(forward: Kernel, dgrad: Kernel, tgmm: Kernel) -> GroupedMatmul:
    """The grouped matmul (x [M, K], w [G, K, N], group_sizes) -> forward(x, w, group_sizes)
    whose gradients are dX = dgrad(dy, w, gs) and dW = tgmm(x, dy, gs) on bf16 copies of
    x, w and dy (the forward's quantization is the identity for the gradient:
    straight-through), each cast to its operand's dtype."""

    class _GroupedMatmul(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor,
                    group_sizes: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(to_bf16(x), to_bf16(w), group_sizes)
            ctx.dtypes = (x.dtype, w.dtype)
            return forward(x, w, group_sizes)

        @staticmethod
        def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
            x16, w16, group_sizes = ctx.saved_tensors
            dy16 = to_bf16(dy)
            dx = dw = None
            if ctx.needs_input_grad[0]:
                dx = dgrad(dy16, w16, group_sizes).to(ctx.dtypes[0])
            if ctx.needs_input_grad[1]:
                dw = tgmm(x16, dy16, group_sizes).to(ctx.dtypes[1])
            return dx, dw, None

    return _GroupedMatmul.apply
