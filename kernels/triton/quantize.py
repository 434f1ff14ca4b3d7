"""Blockwise FP8 (e4m3fn) quantizer in Triton, bit-exact to `fp8check.references.quantize`.

Recipes (all float32, round to nearest even):
  deepgemm        a = max(amax, 1e-4); s = RN(a / 448); q = satfinite(x * RN(1 / s))
  deepgemm-ue8m0  s = 2^e, e = biased exponent of RN(a / 448) + (mantissa != 0), clamped
                  to [1, 254]; q = satfinite(x * 2^-e) (exact)
Blocks (1, 128) (activations, per token) and (128, 128) (weights) over the last two dims;
leading dims (experts) are independent; a partial block's amax covers its valid elements.

Division: both divisions use tl.math.div_rn, the correctly rounded quotient.  On the GPU a
plain `/` on float32 lowers to the approximate div.full.f32 (up to 2 ulp off), which would
make RN(a / 448) and RN(1 / s) differ from the recipe; div_rn lowers to div.rn.f32.  The
final cast is the hardware's cvt.rn.satfinite after an explicit clamp to +-448 (the clamp
makes the result independent of the conversion's overflow behaviour; under the
interpreter the cast is the fixed one from `interpret`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from fp8check.contracts import KernelSpec

from ._common import QBLOCK, prepare_backend
from .spec import triton_spec

RECIPES = ("deepgemm", "deepgemm-ue8m0")
BLOCKS = ((1, QBLOCK), (QBLOCK, QBLOCK))
E4M3_MAX = 448.0
AMAX_FLOOR = 1e-4  # float32(1e-4), as the reference


@triton.jit
def _max_nan(a, b):
    # A bare tl.maximum returns the non-NaN operand on the GPU (PTX max.f32): a NaN value
    # would clamp to -448, masked.  The recipe's max propagates NaN.
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _amax(ax, axis):
    # The recipe's amax propagates NaN; tl.max drops it on the GPU (PTX max.f32).  The sum
    # of |x| is NaN exactly when some |x| is (no inf - inf among non-negative terms), so
    # where it is NaN it stands in for the amax.  tl.max and tl.sum rather than tl.reduce
    # with a NaN-propagating combine: the interpreter runs a custom combine element by
    # element, tens of times slower.
    amax = tl.max(ax, axis=axis)
    total = tl.sum(ax, axis=axis)
    return tl.where(total != total, total, amax)


@triton.jit
def _quantize_kernel(x_ptr, q_ptr, s_ptr, R, C, SR, SC,
                     BLOCK_R: tl.constexpr, TILE_R: tl.constexpr, UE8M0: tl.constexpr):
    batch = tl.program_id(0)
    r0 = tl.program_id(1) * TILE_R
    cb = tl.program_id(2)
    rows = r0 + tl.arange(0, TILE_R)
    cols = cb * 128 + tl.arange(0, 128)
    ok = (rows < R)[:, None] & (cols < C)[None, :]
    offs = batch.to(tl.int64) * R * C + rows[:, None] * C + cols[None, :]
    x = tl.load(x_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    if BLOCK_R == 1:
        amax = _amax(tl.abs(x), 1)  # one block per row: [TILE_R]
    else:
        amax = _amax(_amax(tl.abs(x), 1), 0)  # one block per tile
    s = tl.math.div_rn(_max_nan(amax, 1e-4), 448.0)
    if UE8M0:
        bits = s.to(tl.uint32, bitcast=True)
        e = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).to(tl.uint32)
        e = tl.minimum(tl.maximum(e, 1), 254)
        s = (e << 23).to(tl.float32, bitcast=True)
    m = tl.math.div_rn(1.0, s)  # exact for the ue8m0 power of two
    if BLOCK_R == 1:
        y = x * m[:, None]
        tl.store(s_ptr + batch * SR * SC + rows * SC + cb, s, mask=rows < R)
    else:
        y = x * m
        tl.store(s_ptr + batch * SR * SC + (r0 // BLOCK_R) * SC + cb, s)
    y = tl.minimum(_max_nan(y, -448.0), 448.0, propagate_nan=tl.PropagateNan.ALL)
    tl.store(q_ptr + offs, y.to(tl.float8e4nv), mask=ok)


def quantize_launch(x: torch.Tensor, values: torch.Tensor, scales: torch.Tensor,
                    block: tuple[int, int],
                    recipe: str) -> tuple[tuple[int, ...], tuple, dict]:
    """(grid, positional arguments, constexpr keywords) of the `_quantize_kernel` launch
    on checked, contiguous, non-empty `x` (shared by `quantize_fp8` and
    `native.native_builds`)."""
    *lead, r, c = x.shape
    batch = int(torch.tensor(lead).prod()) if lead else 1
    sr, sc = scales.shape[-2:]
    tile_r = 32 if block[0] == 1 else QBLOCK
    grid = (batch, triton.cdiv(r, tile_r), sc)
    args = (x, values, scales, r, c, sr, sc)
    constexprs = dict(BLOCK_R=block[0], TILE_R=tile_r, UE8M0=recipe == "deepgemm-ue8m0")
    return grid, args, constexprs


def quantize_fp8(x: torch.Tensor, block: tuple[int, int] = (1, QBLOCK),
                 recipe: str = "deepgemm") -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize `x` (float32 or bfloat16, [..., R, C]) to e4m3fn blockwise.

    Returns (values [..., R, C] torch.float8_e4m3fn, scales [..., ceil(R/bR), ceil(C/128)]
    float32 dequantization multipliers).  NaN or Inf in `x` runs through the recipe as
    the reference's nan="propagate" does (docs/contract.md, "Non-finite inputs"): a NaN
    block gets a NaN scale and NaN values, an infinite one an infinite scale, zero values
    and NaN where x is infinite (x * RN(1/inf) = x * 0).
    """
    if tuple(block) not in BLOCKS:
        raise ValueError(f"block must be one of {BLOCKS}, got {tuple(block)}")
    if recipe not in RECIPES:
        raise ValueError(f"recipe must be one of {RECIPES}, got {recipe!r}")
    if x.dtype not in (torch.float32, torch.bfloat16) or x.ndim < 2:
        raise ValueError(f"x must be float32 or bfloat16 with >= 2 dims, got {x.dtype} "
                         f"{tuple(x.shape)}")
    prepare_backend(x.device)
    x = x.contiguous()
    *lead, r, c = x.shape
    sr, sc = triton.cdiv(r, block[0]), triton.cdiv(c, QBLOCK)
    values = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    scales = torch.empty((*lead, sr, sc), dtype=torch.float32, device=x.device)
    if x.numel() == 0:
        return values, scales
    grid, args, constexprs = quantize_launch(x, values, scales, block, recipe)
    _quantize_kernel[grid](*args, **constexprs)
    return values, scales


def quantizer_spec(backend: str) -> KernelSpec:
    """KernelSpec of `quantize_fp8` with its defaults, 1x128 blocks and the deepgemm
    recipe ("triton-quantizer")."""
    return triton_spec("triton-quantizer", "quantizer", quantize_fp8, backend,
                       recipe="deepgemm", description="blockwise FP8 quantizer")
