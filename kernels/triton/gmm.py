"""Padding-free FP8 blockwise grouped GEMM for Hopper (contract ``gmm-fp8``).

out[r, :] = dequant(lhs)[r, :] @ dequant(rhs[g]) for the rows r of group g, where group g
owns rows [sum(M_<g), sum(M_<=g)) and M_g = group_sizes[g] is any non-negative integer.

Schedule (on the device, no host sync): the grid is (row tiles, N / block_n) with a row
tile bound of M // block_m + G.  Each program finds its group from the prefix sums of
ceil(M_g / block_m) (`_common.locate_tile`); programs past the last tile exit.

Residual rows without padding: every program builds tensor descriptors whose base is the
group's first row and whose shape is the group's own [M_g, K] / [M_g, N]
(tl.make_tensor_descriptor, TMA on sm_90).  A load of the group's last, partial tile is
zero-filled past M_g instead of reading the next group's rows, and the store of that tile
is clipped by the descriptor at M_g, so nothing outside the group is written (the clipped
descriptor store replaces the paper's pool of log2(block_m) power-of-two descriptors).
Rows at or past sum(group_sizes) are never written.

Alignment: TMA needs 16-byte aligned global bases and strides.  A group's lhs base is
row0 * K bytes (fp8) and its output base row0 * N * 2 or 4 bytes; with K a multiple of 128
and N a multiple of block_n (>= 64) both are aligned for every row0, so no group start
needs rounding.  The per-group fp32 lhs-scale base row0 * (K/128) * 4 bytes is 16-byte
aligned only when row0 * K/128 is a multiple of 4; scales are therefore read with masked
pointer loads (a [block_m] vector per K block, the paper's global-memory prefetch of the
scale blocks), never through a descriptor.  Shared-memory tiles are allocated by the
compiler with the 128-byte alignment TMA's swizzle needs (rows of 128 fp8 = 128 B).

Accumulation (declared ``accum="deepgemm"``): per 128-wide K block, P = tl.dot of the fp8
tiles in fp32, then acc = fma(RN(sa * sb), P, acc) with tl.fma (one rounding), in K
order; output cast RNE to out_dtype.  Under the interpreter P is the exact partial rounded
once (`interpret`'s ``dot_exact_partial``), so the result is bit-exact to
``references.gmm(..., accum="deepgemm")``; on the GPU, WGMMA's P is not, and only the
error bound holds.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from fp8check.contracts import KernelSpec

from ._common import (
    OUT_DTYPES,
    QBLOCK,
    check_group_sizes,
    check_tma_operand,
    group_schedule,
    locate_tile,
    max_row_tiles,
    output_buffer,
    prepare_backend,
)
from .spec import triton_spec

# Two warpgroups per 128x128 tile: with Triton's default 4 warps one warpgroup holds the
# fp32 accumulator and the tl.dot partial (two 128x128 fp32 tiles), which ptxas fits only
# by spilling (255 registers, 128/120 B of spill stores/loads per thread on sm_90a, gate
# layer 0); with 8 warps: 175 registers, no spills, the same shared memory.
NUM_WARPS = 8


@triton.jit
def _gmm_fp8_kernel(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, c_ptr,
                    group_sizes_ptr, row_ends_ptr, tile_ends_ptr, G, N,
                    K: tl.constexpr, G_POW2: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    MAX_IMPRECISE_ACC: tl.constexpr = None):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    g, row0, size, m0 = locate_tile(pid_m, group_sizes_ptr, row_ends_ptr, tile_ends_ptr, G,
                                    G_POW2, BLOCK_M)
    if g < G:
        KB: tl.constexpr = K // BLOCK_K
        n0 = pid_n * BLOCK_N
        a_desc = tl.make_tensor_descriptor(a_ptr + row0 * K, shape=[size, K], strides=[K, 1],
                                           block_shape=[BLOCK_M, BLOCK_K])
        b_desc = tl.make_tensor_descriptor(b_ptr + g.to(tl.int64) * K * N, shape=[K, N],
                                           strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
        c_desc = tl.make_tensor_descriptor(c_ptr + row0.to(tl.int64) * N, shape=[size, N],
                                           strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
        rows = m0 + tl.arange(0, BLOCK_M)
        a_scale_rows = a_scale_ptr + (row0 + rows) * KB
        b_scale = b_scale_ptr + g * KB * tl.cdiv(N, 128) + n0 // 128
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kb in range(KB):
            a = a_desc.load([m0, kb * BLOCK_K])
            b = b_desc.load([kb * BLOCK_K, n0])
            sa = tl.load(a_scale_rows + kb, mask=rows < size, other=0.0)
            sb = tl.load(b_scale + kb * tl.cdiv(N, 128))
            part = tl.dot(a, b, max_num_imprecise_acc=MAX_IMPRECISE_ACC)
            acc = tl.fma((sa * sb)[:, None], part, acc)
        c_desc.store([m0, n0], acc.to(c_ptr.dtype.element_ty))


def check_gmm_fp8_inputs(lhs_q: torch.Tensor, lhs_scale: torch.Tensor, rhs_q: torch.Tensor,
                         rhs_scale: torch.Tensor, group_sizes: torch.Tensor,
                         out_dtype: torch.dtype, block_m: int, block_n: int) -> None:
    """ValueError (one line) for anything the kernel does not support."""
    if lhs_q.dtype != torch.float8_e4m3fn or rhs_q.dtype != torch.float8_e4m3fn:
        raise ValueError(f"lhs_q and rhs_q must be float8_e4m3fn, got {lhs_q.dtype}, "
                         f"{rhs_q.dtype}")
    if lhs_q.ndim != 2 or rhs_q.ndim != 3:
        raise ValueError(f"lhs_q must be [M,K] and rhs_q [G,K,N], got {tuple(lhs_q.shape)}, "
                         f"{tuple(rhs_q.shape)}")
    m, k = lhs_q.shape
    g, k2, n = rhs_q.shape
    if k != k2 or k % QBLOCK or k == 0:
        raise ValueError(f"K must match and be a positive multiple of {QBLOCK}: {k} vs {k2}")
    if block_n not in (64, 128) or n % block_n:
        raise ValueError(f"block_n must be 64 or 128 and divide N = {n}, got {block_n}")
    if block_m < 16 or block_m & (block_m - 1):
        raise ValueError(f"block_m must be a power of two >= 16, got {block_m}")
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"out_dtype must be one of {OUT_DTYPES}, got {out_dtype}")
    want_ls, want_rs = (m, k // QBLOCK), (g, k // QBLOCK, triton.cdiv(n, QBLOCK))
    if lhs_scale.dtype != torch.float32 or tuple(lhs_scale.shape) != want_ls:
        raise ValueError(f"lhs_scale must be float32 {want_ls}, got {lhs_scale.dtype} "
                         f"{tuple(lhs_scale.shape)}")
    if rhs_scale.dtype != torch.float32 or tuple(rhs_scale.shape) != want_rs:
        raise ValueError(f"rhs_scale must be float32 {want_rs}, got {rhs_scale.dtype} "
                         f"{tuple(rhs_scale.shape)}")
    for name, t in (("lhs_q", lhs_q), ("rhs_q", rhs_q)):
        check_tma_operand(name, t)
    for name, t in (("lhs_scale", lhs_scale), ("rhs_scale", rhs_scale)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    check_group_sizes(group_sizes, g, m)


def gmm_fp8_launch(lhs_q: torch.Tensor, lhs_scale: torch.Tensor, rhs_q: torch.Tensor,
                   rhs_scale: torch.Tensor, group_sizes: torch.Tensor, out: torch.Tensor,
                   block_m: int, block_n: int, max_num_imprecise_acc: int | None = None,
                   ) -> tuple[tuple[int, ...], tuple, dict]:
    """(grid, positional arguments, constexpr keywords) of the `_gmm_fp8_kernel` launch on
    checked inputs: the one source of the launch for `launch_gmm_fp8` and for the native
    builds (`native.native_builds`, which passes meta tensors)."""
    check_imprecise_acc(max_num_imprecise_acc)
    m, k = lhs_q.shape
    g, _, n = rhs_q.shape
    row_ends, tile_ends = group_schedule(group_sizes, block_m)
    grid = (max_row_tiles(m, g, block_m), n // block_n)
    args = (lhs_q, lhs_scale, rhs_q, rhs_scale, out, group_sizes, row_ends, tile_ends, g, n)
    constexprs = dict(K=k, G_POW2=triton.next_power_of_2(g), BLOCK_M=block_m,
                      BLOCK_N=block_n, BLOCK_K=QBLOCK)
    if max_num_imprecise_acc is not None:
        constexprs["MAX_IMPRECISE_ACC"] = max_num_imprecise_acc
    return grid, args, constexprs


def check_imprecise_acc(max_num_imprecise_acc: int | None) -> None:
    """ValueError unless None (Triton's target default: 2**30 on sm_90, the tensor core
    never promotes inside one 128-wide block) or a positive multiple of 32 (a k32 WGMMA
    step) up to 128 (the block: DeepGEMM's promotion interval)."""
    v = max_num_imprecise_acc
    if v is not None and (not isinstance(v, int) or v <= 0 or v % 32 or v > QBLOCK):
        raise ValueError(f"max_num_imprecise_acc must be None or 32, 64, 96 or 128, got {v!r}")


def launch_gmm_fp8(lhs_q: torch.Tensor, lhs_scale: torch.Tensor, rhs_q: torch.Tensor,
                   rhs_scale: torch.Tensor, group_sizes: torch.Tensor, out: torch.Tensor,
                   block_m: int, block_n: int,
                   max_num_imprecise_acc: int | None = None) -> torch.Tensor:
    """Run the kernel on checked inputs into `out` [M, N]; shared with the padded path."""
    prepare_backend(lhs_q.device)
    grid, args, constexprs = gmm_fp8_launch(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes,
                                            out, block_m, block_n, max_num_imprecise_acc)
    _gmm_fp8_kernel[grid](*args, **constexprs, num_warps=NUM_WARPS)
    return out


def gmm_fp8(lhs_q: torch.Tensor, lhs_scale: torch.Tensor, rhs_q: torch.Tensor,
            rhs_scale: torch.Tensor, group_sizes: torch.Tensor, *,
            out_dtype: torch.dtype = torch.bfloat16, block_m: int = 128, block_n: int = 128,
            out: torch.Tensor | None = None,
            max_num_imprecise_acc: int | None = None) -> torch.Tensor:
    """Padding-free grouped GEMM, contract ``gmm-fp8``.

    lhs_q [M,K] e4m3fn with lhs_scale [M,K/128] f32 (1x128 blocks), rhs_q [G,K,N] e4m3fn
    with rhs_scale [G,K/128,N/128] f32 (128x128 blocks per expert), group_sizes [G] int32
    (sum <= M).  Returns [M,N] `out_dtype`; rows at or past sum(group_sizes) are left as
    they were in `out` (uninitialised when `out` is None).  K must be a multiple of 128,
    N of block_n (64 or 128).  `max_num_imprecise_acc` is Triton's knob for the FP8 dot of
    each 128-wide block: how many K elements the tensor core accumulates in its truncating
    accumulator before the partial is added into float32 (None: the target's default, the
    whole block on sm_90; 32: every k32 step promoted).  The per-block `tl.fma` promotion
    is the kernel's own and stays.
    """
    check_gmm_fp8_inputs(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype,
                         block_m, block_n)
    check_imprecise_acc(max_num_imprecise_acc)
    m, n = lhs_q.shape[0], rhs_q.shape[2]
    out = output_buffer(out, (m, n), out_dtype, lhs_q.device)
    check_tma_operand("out", out)
    return launch_gmm_fp8(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out, block_m,
                          block_n, max_num_imprecise_acc)


def fp8_spec(backend: str) -> KernelSpec:
    """KernelSpec of `gmm_fp8` ("triton-fp8"): accum "deepgemm" under the interpreter's
    exact partial dot, "deepgemm-hopper" compiled (`spec.triton_spec`)."""
    return triton_spec("triton-fp8", "gmm-fp8", gmm_fp8, backend, accum="deepgemm",
                       description="padding-free FP8 grouped GEMM")


def fp8_blackwell_spec(backend: str) -> KernelSpec:
    """KernelSpec of `gmm_fp8` with the interpreter's Blackwell tensor-core dot
    ("triton-fp8-blackwell", accum "deepgemm-blackwell"); compiled, the same as
    `fp8_spec`."""
    return triton_spec("triton-fp8-blackwell", "gmm-fp8", gmm_fp8, backend, dot="blackwell",
                       build="triton-fp8",
                       description="padding-free FP8 grouped GEMM (Blackwell tensor-core dot)")


def fp8_hopper_spec(backend: str) -> KernelSpec:
    """KernelSpec of `gmm_fp8` with the interpreter's Hopper tensor-core dot
    ("triton-fp8-hopper", accum "deepgemm-hopper"); compiled, the same as `fp8_spec`."""
    return triton_spec("triton-fp8-hopper", "gmm-fp8", gmm_fp8, backend, dot="hopper",
                       build="triton-fp8",
                       description="padding-free FP8 grouped GEMM (Hopper tensor-core dot)")
