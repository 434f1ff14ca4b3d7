"""Shared pieces of the grouped kernels: input checks, the device-side group schedule,
and the launch-time backend set-up.  Internal to `fp8check.kernels.triton`."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from fp8check.contracts import OUT_DTYPES as OUT_DTYPE_NAMES
from fp8check.contracts import framework_dtype
from fp8check.references.quant import BLOCK

from .fidelity import probe_fidelity
from .interpret import interpret_mode

QBLOCK = BLOCK  # quantization block along K (and along N for the weights), elements
# The contract's output dtypes as torch dtypes (the names live in fp8check.contracts).
OUT_DTYPES = tuple(framework_dtype("torch", name) for name in OUT_DTYPE_NAMES)
TMA_ALIGN = 16  # bytes: TMA needs 16-byte aligned global base addresses and strides


def prepare_backend(device: torch.device) -> None:
    """Interpret mode: self-test + fix the interpreter (once).  Compiled: device-side
    tensor descriptors (tl.make_tensor_descriptor) need a global scratch allocator."""
    probe_fidelity()
    if not interpret_mode():
        if device.type != "cuda":
            raise ValueError("compiled Triton kernels need CUDA tensors (or TRITON_INTERPRET=1)")
        triton.set_allocator(
            lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=device))


def check_group_sizes(group_sizes: torch.Tensor, num_groups: int, m: int) -> None:
    """ValueError unless `group_sizes` is int32 [G], non-negative, sum <= M.
    (The sum check reads the tensor on the host: one sync, the price of never writing
    out of bounds.)"""
    if group_sizes.dtype != torch.int32 or group_sizes.shape != (num_groups,):
        raise ValueError(f"group_sizes must be int32 [{num_groups}], got "
                         f"{group_sizes.dtype} {tuple(group_sizes.shape)}")
    if bool((group_sizes < 0).any()):
        raise ValueError("group_sizes must be non-negative")
    total = int(group_sizes.sum())
    if total > m:
        raise ValueError(f"sum(group_sizes) = {total} exceeds M = {m}")


def check_tma_operand(name: str, t: torch.Tensor) -> None:
    """ValueError unless `t` is contiguous with a 16-byte aligned base and row stride,
    so that every per-group descriptor base (base + row0 * row_bytes) is aligned too."""
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous")
    row_bytes = t.shape[-1] * t.element_size()
    if t.data_ptr() % TMA_ALIGN or row_bytes % TMA_ALIGN:
        raise ValueError(f"{name}: base address and row ({row_bytes} B) must be "
                         f"{TMA_ALIGN}-byte aligned")


def group_schedule(group_sizes: torch.Tensor, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Device-side schedule, no host sync: (row_ends [G], tile_ends [G]) int32, the
    inclusive prefix sums of M_g and of ceil(M_g / block_m)."""
    row_ends = torch.cumsum(group_sizes, 0, dtype=torch.int32)
    tile_ends = torch.cumsum((group_sizes + block_m - 1) // block_m, 0, dtype=torch.int32)
    return row_ends, tile_ends


def max_row_tiles(m: int, num_groups: int, block_m: int) -> int:
    """Grid bound on the row tiles: sum ceil(M_g / bm) <= floor(sum M_g / bm) + G."""
    return m // block_m + num_groups


@triton.jit
def locate_tile(pid_m, group_sizes_ptr, row_ends_ptr, tile_ends_ptr, G,
                G_POW2: tl.constexpr, BLOCK_M: tl.constexpr):
    """Map row-tile `pid_m` to (group g, group's first row, M_g, first row of the tile
    inside the group).  g == G means the tile is past the last group (nothing to do).
    Empty groups own no tile: their tile_end equals their start."""
    gidx = tl.arange(0, G_POW2)
    ends = tl.load(tile_ends_ptr + gidx, mask=gidx < G, other=2**30)
    g = tl.sum((ends <= pid_m).to(tl.int32), axis=0)
    gs = tl.minimum(g, G - 1)  # clamped for the loads; callers test g < G
    size = tl.load(group_sizes_ptr + gs)
    row0 = tl.load(row_ends_ptr + gs) - size
    tile0 = tl.load(tile_ends_ptr + gs) - tl.cdiv(size, BLOCK_M)
    return g, row0, size, (pid_m - tile0) * BLOCK_M


def output_buffer(out: torch.Tensor | None, shape: tuple[int, ...], dtype: torch.dtype,
                  device: torch.device, *, zero: bool = False) -> torch.Tensor:
    """The caller's `out` checked to be `dtype` of `shape`, or a new one (zeroed when
    `zero`, else uninitialised)."""
    if out is None:
        return (torch.zeros if zero else torch.empty)(shape, dtype=dtype, device=device)
    if tuple(out.shape) != tuple(shape) or out.dtype != dtype:
        raise ValueError(f"out must be {dtype} {tuple(shape)}, got {out.dtype} "
                         f"{tuple(out.shape)}")
    return out
