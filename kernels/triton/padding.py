"""The padded baseline the paper compares against, and what its padding costs.

`gmm_fp8_padded` builds DeepGEMM's contiguous layout with an explicit copy: each group's
rows are copied into a buffer where group g starts at a multiple of block_m and is
followed by zero rows up to the next multiple; then the same kernel as `gmm_fp8` runs on
the aligned groups (every tile full, no residual), and the valid rows are gathered back.
Because each output row depends only on its own lhs row, its own scales and its group's
rhs, the valid rows equal `gmm_fp8`'s bit for bit (the paper's equivalence claim, tested).
The copy needs the padded row count on the host (one sync), as any padded launch does.
"""

from __future__ import annotations

import torch

from fp8check.contracts import KernelSpec

from ._common import QBLOCK, output_buffer
from .gmm import check_gmm_fp8_inputs, launch_gmm_fp8
from .spec import triton_spec

_BYTES_FP8 = 1
_BYTES_SCALE = 4


def padded_sizes(group_sizes: torch.Tensor, block_m: int) -> torch.Tensor:
    """Every M_g rounded up to a multiple of block_m (int32 [G])."""
    return ((group_sizes + block_m - 1) // block_m * block_m).to(torch.int32)


def padded_row_index(group_sizes: torch.Tensor, block_m: int) -> torch.Tensor:
    """int64 [sum M_g]: the padded-buffer row of each valid row, in order."""
    sizes = group_sizes.to(torch.int64)
    pad_starts = torch.cumsum(padded_sizes(group_sizes, block_m), 0) - padded_sizes(
        group_sizes, block_m)
    starts = torch.cumsum(sizes, 0) - sizes
    group_of_row = torch.repeat_interleave(torch.arange(len(sizes), device=sizes.device), sizes)
    rows = torch.arange(int(sizes.sum()), device=sizes.device)
    return rows - starts[group_of_row] + pad_starts[group_of_row]


def padding_overhead(group_sizes, k: int, n: int, block_m: int = 128, *,
                     out_bytes: int = 2) -> int:
    """Bytes the padding rows cost in the padded layout: each row added to round M_g up
    to a multiple of block_m carries K fp8 lhs bytes, K/128 float32 scales and N output
    elements of `out_bytes` (2 for bf16).  The transient copies are not counted."""
    sizes = torch.as_tensor(group_sizes, dtype=torch.int64)
    if (sizes < 0).any() or k <= 0 or n <= 0 or block_m <= 0:
        raise ValueError("padding_overhead: sizes must be >= 0 and K, N, block_m positive")
    pad_rows = int((padded_sizes(sizes, block_m).to(torch.int64) - sizes).sum())
    row_bytes = k * _BYTES_FP8 + -(-k // QBLOCK) * _BYTES_SCALE + n * out_bytes
    return pad_rows * row_bytes


def gmm_fp8_padded(lhs_q: torch.Tensor, lhs_scale: torch.Tensor, rhs_q: torch.Tensor,
                   rhs_scale: torch.Tensor, group_sizes: torch.Tensor, *,
                   out_dtype: torch.dtype = torch.bfloat16, block_m: int = 128,
                   block_n: int = 128, out: torch.Tensor | None = None) -> torch.Tensor:
    """Same contract and result as `gmm_fp8` (valid rows bit-identical), computed by
    padding every group to a multiple of block_m, running the aligned kernel, and dropping
    the padding.  Rows at or past sum(group_sizes) of `out` are left as they were."""
    check_gmm_fp8_inputs(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype,
                         block_m, block_n)
    m, n = lhs_q.shape[0], rhs_q.shape[2]
    out = output_buffer(out, (m, n), out_dtype, lhs_q.device)
    sizes_pad = padded_sizes(group_sizes, block_m)
    m_pad = int(sizes_pad.sum())
    dest = padded_row_index(group_sizes, block_m)
    total = dest.numel()
    # Zero rows quantize to zero whatever their scale; 1.0 keeps the padding finite.
    lhs_pad = torch.zeros((m_pad, lhs_q.shape[1]), dtype=lhs_q.dtype, device=lhs_q.device)
    scale_pad = torch.ones((m_pad, lhs_scale.shape[1]), dtype=torch.float32,
                           device=lhs_q.device)
    lhs_pad.view(torch.uint8)[dest] = lhs_q[:total].view(torch.uint8)
    scale_pad[dest] = lhs_scale[:total]
    out_pad = torch.empty((m_pad, n), dtype=out_dtype, device=lhs_q.device)
    if m_pad:
        launch_gmm_fp8(lhs_pad, scale_pad, rhs_q, rhs_scale, sizes_pad, out_pad, block_m,
                       block_n)
    out[:total] = out_pad[dest]
    return out


def fp8_padded_spec(backend: str) -> KernelSpec:
    """KernelSpec of `gmm_fp8_padded` ("triton-fp8-padded"), declared as `gmm.fp8_spec`."""
    return triton_spec("triton-fp8-padded", "gmm-fp8", gmm_fp8_padded, backend,
                       accum="deepgemm", description="padded FP8 grouped GEMM (baseline)")
