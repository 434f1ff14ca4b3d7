"""bf16 backward kernels of the grouped linear layer (no backward quantization).

dgrad: dX[r, :] = dY[r, :] @ W_g^T for the rows r of group g   (dY [M,N], W [G,K,N])
tgmm:  dW_g = X_g^T @ dY_g over the variable M_g rows of group g (X [M,K], dY [M,N]);
       an empty group gives zeros.
Both take bf16 operands, accumulate in float32 with tl.dot(a, b, acc) per tile of the
reduced dim (block_n for dgrad, block_m for tgmm) and round once to out_dtype.  Like
`gmm`, they use per-group tensor descriptors with the group's own row count, so partial
tiles neither read nor write another group's rows, and rows at or past sum(group_sizes)
are never written.  Accuracy contract: the error bound of a float32 sum (no bit-exact
recipe; the interpreter's per-tile partial is exact, the GPU's is WGMMA's).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from fp8check.contracts import KernelSpec

from ._common import (
    OUT_DTYPES,
    check_group_sizes,
    check_tma_operand,
    group_schedule,
    locate_tile,
    max_row_tiles,
    output_buffer,
    prepare_backend,
)
from .spec import triton_spec


@triton.jit
def _dgrad_kernel(dy_ptr, w_ptr, dx_ptr, group_sizes_ptr, row_ends_ptr, tile_ends_ptr, G,
                  K, N: tl.constexpr, G_POW2: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    g, row0, size, m0 = locate_tile(tl.program_id(0), group_sizes_ptr, row_ends_ptr,
                                    tile_ends_ptr, G, G_POW2, BLOCK_M)
    if g < G:
        k0 = tl.program_id(1) * BLOCK_K
        dy_desc = tl.make_tensor_descriptor(dy_ptr + row0.to(tl.int64) * N, shape=[size, N],
                                            strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
        w_desc = tl.make_tensor_descriptor(w_ptr + g.to(tl.int64) * K * N, shape=[K, N],
                                           strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
        dx_desc = tl.make_tensor_descriptor(dx_ptr + row0.to(tl.int64) * K, shape=[size, K],
                                            strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
        acc = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
        for n0 in range(0, N, BLOCK_N):
            acc = tl.dot(dy_desc.load([m0, n0]), tl.trans(w_desc.load([k0, n0])), acc)
        dx_desc.store([m0, k0], acc.to(dx_ptr.dtype.element_ty))


@triton.jit
def _tgmm_kernel(x_ptr, dy_ptr, dw_ptr, group_sizes_ptr, row_ends_ptr, K, N,
                 BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr):
    g = tl.program_id(0)
    k0 = tl.program_id(1) * BLOCK_K
    n0 = tl.program_id(2) * BLOCK_N
    size = tl.load(group_sizes_ptr + g)
    row0 = tl.load(row_ends_ptr + g) - size
    acc = tl.zeros((BLOCK_K, BLOCK_N), dtype=tl.float32)
    if size > 0:  # an empty group builds no descriptor (TMA needs extents >= 1)
        x_desc = tl.make_tensor_descriptor(x_ptr + row0.to(tl.int64) * K, shape=[size, K],
                                           strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
        dy_desc = tl.make_tensor_descriptor(dy_ptr + row0.to(tl.int64) * N, shape=[size, N],
                                            strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
        for m0 in range(0, size, BLOCK_M):
            acc = tl.dot(tl.trans(x_desc.load([m0, k0])), dy_desc.load([m0, n0]), acc)
    dw_desc = tl.make_tensor_descriptor(dw_ptr + g.to(tl.int64) * K * N, shape=[K, N],
                                        strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    dw_desc.store([k0, n0], acc.to(dw_ptr.dtype.element_ty))


def _check_bf16(name: str, t: torch.Tensor, ndim: int) -> None:
    if t.dtype != torch.bfloat16 or t.ndim != ndim:
        raise ValueError(f"{name} must be bfloat16 with {ndim} dims, got {t.dtype} "
                         f"{tuple(t.shape)}")
    check_tma_operand(name, t)


def _check_tiles(k: int, n: int, block_k: int, block_n: int) -> None:
    for dim, size, blk in (("K", k, block_k), ("N", n, block_n)):
        if blk < 16 or blk & (blk - 1) or size % blk or size == 0:
            raise ValueError(f"{dim} = {size} must be a positive multiple of its block "
                             f"{blk} (a power of two >= 16)")


def _out(out: torch.Tensor | None, shape, dtype, device, zero: bool) -> torch.Tensor:
    if dtype not in OUT_DTYPES:
        raise ValueError(f"out_dtype must be one of {OUT_DTYPES}, got {dtype}")
    out = output_buffer(out, shape, dtype, device, zero=zero)
    check_tma_operand("out", out)
    return out


def dgrad_launch(dy: torch.Tensor, w: torch.Tensor, group_sizes: torch.Tensor,
                 out: torch.Tensor, block_m: int, block_n: int,
                 block_k: int) -> tuple[tuple[int, ...], tuple, dict]:
    """(grid, positional arguments, constexpr keywords) of the `_dgrad_kernel` launch on
    checked inputs (shared by `dgrad` and `native.native_builds`)."""
    m, n = dy.shape
    g, k, _ = w.shape
    row_ends, tile_ends = group_schedule(group_sizes, block_m)
    grid = (max_row_tiles(m, g, block_m), k // block_k)
    args = (dy, w, out, group_sizes, row_ends, tile_ends, g, k)
    constexprs = dict(N=n, G_POW2=triton.next_power_of_2(g), BLOCK_M=block_m,
                      BLOCK_N=block_n, BLOCK_K=block_k)
    return grid, args, constexprs


def tgmm_launch(x: torch.Tensor, dy: torch.Tensor, group_sizes: torch.Tensor,
                out: torch.Tensor, block_m: int, block_k: int,
                block_n: int) -> tuple[tuple[int, ...], tuple, dict]:
    """(grid, positional arguments, constexpr keywords) of the `_tgmm_kernel` launch on
    checked inputs with G >= 1 (shared by `tgmm` and `native.native_builds`)."""
    k, n = x.shape[1], dy.shape[1]
    g = group_sizes.shape[0]
    row_ends = torch.cumsum(group_sizes, 0, dtype=torch.int32)
    grid = (g, k // block_k, n // block_n)
    args = (x, dy, out, group_sizes, row_ends, k, n)
    return grid, args, dict(BLOCK_M=block_m, BLOCK_K=block_k, BLOCK_N=block_n)


def dgrad(dy: torch.Tensor, w: torch.Tensor, group_sizes: torch.Tensor, *,
          out_dtype: torch.dtype = torch.bfloat16, block_m: int = 64, block_n: int = 64,
          block_k: int = 64, out: torch.Tensor | None = None) -> torch.Tensor:
    """dX [M,K] = dY [M,N] @ W_g^T per group (bf16 in, float32 accumulation).  Rows at or
    past sum(group_sizes) keep `out`'s contents (zeros when `out` is None)."""
    _check_bf16("dy", dy, 2)
    _check_bf16("w", w, 3)
    m, n = dy.shape
    g, k, n2 = w.shape
    if n2 != n:
        raise ValueError(f"dy [M,N] and w [G,K,N] disagree on N: {n} vs {n2}")
    _check_tiles(k, n, block_k, block_n)
    if block_m < 16 or block_m & (block_m - 1):
        raise ValueError(f"block_m must be a power of two >= 16, got {block_m}")
    check_group_sizes(group_sizes, g, m)
    out = _out(out, (m, k), out_dtype, dy.device, zero=True)
    prepare_backend(dy.device)
    grid, args, constexprs = dgrad_launch(dy, w, group_sizes, out, block_m, block_n, block_k)
    _dgrad_kernel[grid](*args, **constexprs)
    return out


def tgmm(x: torch.Tensor, dy: torch.Tensor, group_sizes: torch.Tensor, *,
         out_dtype: torch.dtype = torch.float32, block_m: int = 64, block_k: int = 64,
         block_n: int = 64, out: torch.Tensor | None = None) -> torch.Tensor:
    """dW [G,K,N] with dW_g = X_g^T @ dY_g over group g's M_g rows (bf16 in, float32
    accumulation); an empty group gives zeros."""
    _check_bf16("x", x, 2)
    _check_bf16("dy", dy, 2)
    if x.shape[0] != dy.shape[0]:
        raise ValueError(f"x and dy disagree on M: {x.shape[0]} vs {dy.shape[0]}")
    m, k = x.shape
    n = dy.shape[1]
    g = group_sizes.shape[0] if group_sizes.ndim == 1 else -1
    _check_tiles(k, n, block_k, block_n)
    if block_m < 16 or block_m & (block_m - 1):
        raise ValueError(f"block_m must be a power of two >= 16, got {block_m}")
    check_group_sizes(group_sizes, g, m)
    out = _out(out, (g, k, n), out_dtype, x.device, zero=False)
    if g == 0:
        return out
    prepare_backend(x.device)
    grid, args, constexprs = tgmm_launch(x, dy, group_sizes, out, block_m, block_k, block_n)
    _tgmm_kernel[grid](*args, **constexprs)
    return out


def tgmm_spec(backend: str) -> KernelSpec:
    """KernelSpec of `tgmm` ("triton-tgmm"): bound only, no recipe pinned."""
    return triton_spec("triton-tgmm", "tgmm", tgmm, backend,
                       description="bf16 weight-gradient grouped GEMM")
