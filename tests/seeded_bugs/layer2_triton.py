"""The layer-2 seeded bugs of `seeded_bugs.layer2`, in the torch MoE layer on the Triton
kernels: the kernels are the correct ones (they pass layer 1); the bug is in how a
torch.autograd.Function wires them, which only a layer-level gradient check exercises.

Each bug is a drop-in for `grouped_linear_fp8` (correct FP8 forward, buggy bf16
backward), so `run_moe(inp, BUGS[name])` is the whole layer with the bug inside.
"""

from __future__ import annotations

import torch

from fp8check.kernels.triton import dgrad, quantize_fp8, tgmm
from fp8check.kernels.triton.autograd import _fp8_forward
from fp8check.layers.moe.torch_layer import GroupedMatmul, run_moe

from .layer2_table import bug_table, layer_running


def _leaky_sizes(group_sizes: torch.Tensor) -> torch.Tensor:
    """Every group boundary moved one row down: group g's reduction also takes the first
    row of the next group (an off-by-one in the end offset of each group)."""
    ends = torch.cumsum(group_sizes, 0)
    total = ends[-1]
    leaky = torch.minimum(ends + 1, total)
    leaky[-1] = total
    return torch.diff(leaky, prepend=leaky.new_zeros(1)).to(torch.int32)


def _dgrad_ok(dy16, w16, gs):
    return dgrad(dy16, w16, gs, out_dtype=torch.float32)


def _dgrad_transposed(dy16, w16, gs):
    # dX = dY @ W_g instead of dY @ W_g^T: only type-checks for a square W_g (wo with
    # d_ff == d_model), which is exactly how it slips through.
    if w16.shape[1] == w16.shape[2]:
        w16 = w16.transpose(1, 2).contiguous()
    return _dgrad_ok(dy16, w16, gs)


def _tgmm_ok(x16, dy16, gs):
    return tgmm(x16, dy16, gs, out_dtype=torch.float32)


def _tgmm_leak(x16, dy16, gs):
    return _tgmm_ok(x16, dy16, _leaky_sizes(gs))


def _tgmm_rolled(x16, dy16, gs):
    # Expert g's weight gradient lands on expert g+1 (an expert index off by one).
    return torch.roll(_tgmm_ok(x16, dy16, gs), 1, dims=0)


def _dequantized(x: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    q, s = quantize_fp8(x, block)
    for axis, b in enumerate(block, start=x.ndim - 2):
        s = torch.repeat_interleave(s, b, dim=axis)
    return (q.float() * s).to(torch.bfloat16).contiguous()


def _buggy_linear(dgrad_fn, tgmm_fn, *, quantized_residuals: bool = False) -> GroupedMatmul:
    class Linear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, group_sizes):
            x16, w16 = x.to(torch.bfloat16).contiguous(), w.to(torch.bfloat16).contiguous()
            if quantized_residuals:
                # Saves the FP8 operands for the backward instead of the bf16 originals:
                # the "zero backward quantization" the layer claims is not what it runs.
                x16, w16 = _dequantized(x, (1, 128)), _dequantized(w, (128, 128))
            ctx.save_for_backward(x16, w16, group_sizes)
            ctx.dtypes = (x.dtype, w.dtype)
            return _fp8_forward(x, w, None, None, group_sizes)

        @staticmethod
        def backward(ctx, dy):
            x16, w16, gs = ctx.saved_tensors
            dy16 = dy.to(torch.bfloat16).contiguous()
            return (dgrad_fn(dy16, w16, gs).to(ctx.dtypes[0]),
                    tgmm_fn(x16, dy16, gs).to(ctx.dtypes[1]), None)

    return Linear.apply


BUGS, CORRECT = bug_table(_buggy_linear, _dgrad_ok, _dgrad_transposed, _tgmm_ok, _tgmm_leak,
                          _tgmm_rolled)


def layer_with(gmm: GroupedMatmul):
    """A `layer_impl` for `run_layer2` running this family's MoE layer with `gmm`."""
    return layer_running(run_moe, gmm)
