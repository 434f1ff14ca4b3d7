"""Blockwise FP8 quantizer references, bit-exact to each recipe's source.

`quantize(x, block, recipe, fmt)` splits the last two dims of `x` into blocks of `block`
(any leading dims, e.g. experts, are independent), computes each block's amax over its
valid elements (a partial block at the edge covers only what exists: padding with zeros
never changes an amax), derives the recipe's scale and rounds.  All arithmetic is float32
round-to-nearest-even on the exact float32 image of the input (bf16 and f32 inputs upcast
exactly); the final cast saturates to the finite range before rounding (satfinite), so the
result never depends on a library's overflow behaviour.

Recipes (s = dequantization multiplier stored in `scales`, q = stored fp8 value):

=========================  ===================================================
deepgemm                   a = max(amax, 1e-4); s = RN(a / fmax); q = sat(x * RN(1/s))
deepgemm-ue8m0             s = 2^e, e = ceil(log2(RN(a / fmax))) from the bits (biased
                           exponent + (mantissa != 0), clamped to [1, 254]); q = sat(x * 2^-e)
deepseek-v3                s = RN(a / fmax); q = sat(RN(x / s))
transformer-engine         m = RN(fmax / amax) (eps 0); amax == 0 or non-finite -> m = 1;
                           m = inf -> largest finite of x's dtype; s = RN(1 / m); q = sat(x * m)
transformer-engine-pow2    as above, then m keeps only sign and exponent (bits & 0xFF800000)
=========================  ===================================================

`fmax` is the format's largest finite value (448 for e4m3fn, 57344 for e5m2).  For ue8m0
the product x * 2^-e is exact whenever it stays a normal float32; if it falls below 2^-126
it is far below the smallest fp8 subnormal and rounds to zero either way.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from fp8check.formats import get_format, satfinite

RECIPES = (
    "deepgemm",
    "deepgemm-ue8m0",
    "deepseek-v3",
    "transformer-engine",
    "transformer-engine-pow2",
)
BLOCK = 128  # the quantization block's edge: 1x128 activations, 128x128 weights
BLOCKS = ((1, BLOCK), (BLOCK, BLOCK), (BLOCK, 1))
FP8_FORMATS = ("e4m3fn", "e5m2")
_DEEPGEMM_AMAX_FLOOR = np.float32(1e-4)


@dataclass(frozen=True)
class QTensor:
    """A blockwise-quantized tensor.

    values: ml_dtypes fp8 array with the shape of the quantized input.
    scales: float32 [..., ceil(R/bR), ceil(C/bC)], the dequantization multiplier per block.
    block:  (bR, bC) over the last two dims.
    """

    values: np.ndarray
    scales: np.ndarray
    block: tuple[int, int]
    fmt: str
    recipe: str

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape


def block_grid(shape: tuple[int, ...], block: tuple[int, int]) -> tuple[int, int]:
    """Number of blocks (rows, cols) over the last two dims, ceil-divided."""
    r, c = shape[-2], shape[-1]
    return -(-r // block[0]), -(-c // block[1])


def expand_scales(scales: np.ndarray, block: tuple[int, int], shape: tuple[int, ...]):
    """Broadcast per-block `scales` to one entry per element of `shape` (cropped)."""
    full = np.repeat(np.repeat(scales, block[0], axis=-2), block[1], axis=-1)
    return full[..., : shape[-2], : shape[-1]]


def _check_args(x: np.ndarray, block, recipe: str, fmt: str, nan: str) -> tuple[int, int]:
    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; expected one of {RECIPES}")
    if tuple(block) not in BLOCKS:
        raise ValueError(f"unsupported block {tuple(block)}; expected one of {BLOCKS}")
    if fmt not in FP8_FORMATS:
        raise ValueError(f"unknown fp8 format {fmt!r}; expected one of {FP8_FORMATS}")
    if nan not in ("raise", "propagate"):
        raise ValueError(f"nan policy must be 'raise' or 'propagate', got {nan!r}")
    if x.dtype not in (np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16)):
        raise ValueError(f"quantize expects float32 or bfloat16 input, got {x.dtype}")
    if x.ndim < 2:
        raise ValueError(f"quantize expects at least 2 dims, got shape {x.shape}")
    return tuple(block)


def block_amax(x32: np.ndarray, block: tuple[int, int]) -> np.ndarray:
    """Per-block max |x| over the last two dims (float32, NaN propagates)."""
    nr, nc = block_grid(x32.shape, block)
    pad = [(0, 0)] * (x32.ndim - 2) + [
        (0, nr * block[0] - x32.shape[-2]),
        (0, nc * block[1] - x32.shape[-1]),
    ]
    a = np.abs(np.pad(x32, pad))
    a = a.reshape(*x32.shape[:-2], nr, block[0], nc, block[1])
    return a.max(axis=(-3, -1))


def _ue8m0(s: np.ndarray) -> np.ndarray:
    """2^e with e = exponent of s rounded up to a power of two, from the float32 bits."""
    bits = s.view(np.uint32)
    exp = ((bits >> 23) & 0xFF).astype(np.int64)
    exp = exp + ((bits & 0x7FFFFF) != 0)
    exp = np.clip(exp, 1, 254)
    return (exp.astype(np.uint32) << 23).view(np.float32)


def recipe_scales(amax: np.ndarray, recipe: str, fmax: np.float32, in_dtype) -> tuple:
    """(dequant scale s, quant multiplier m or None, divide flag) per block, float32."""
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        if recipe.startswith("transformer-engine"):
            m = fmax / amax
            big = np.float32(ml_dtypes.finfo(in_dtype).max if in_dtype != np.float32
                             else np.finfo(np.float32).max)
            m = np.where(np.isinf(m), big, m)
            m = np.where((amax == 0) | ~np.isfinite(amax), np.float32(1), m).astype(np.float32)
            if recipe.endswith("pow2"):
                m = (m.view(np.uint32) & np.uint32(0xFF800000)).view(np.float32)
            return (np.float32(1) / m).astype(np.float32), m
        s = (np.maximum(amax, _DEEPGEMM_AMAX_FLOOR) / fmax).astype(np.float32)
        if recipe == "deepgemm-ue8m0":
            s = _ue8m0(s)
            return s, (np.float32(1) / s).astype(np.float32)  # exact: s is a power of two
        if recipe == "deepseek-v3":
            return s, None
        return s, (np.float32(1) / s).astype(np.float32)


def quantize(
    x,
    block: tuple[int, int] = (1, 128),
    recipe: str = "deepgemm",
    fmt: str = "e4m3fn",
    nan: str = "raise",
) -> QTensor:
    """Quantize `x` (float32 or bfloat16, shape [..., R, C]) blockwise with `recipe`.

    Returns a QTensor whose `values` are `fmt` (ml_dtypes) and whose `scales` are the
    float32 dequantization multipliers, shape [..., ceil(R/bR), ceil(C/bC)].
    NaN or Inf in `x` raises ValueError unless nan="propagate", in which case the recipe's
    arithmetic runs as written (a NaN block gets a NaN scale and NaN values).
    """
    x = np.asarray(x)
    block = _check_args(x, block, recipe, fmt, nan)
    x32 = x.astype(np.float32)
    if nan == "raise" and not np.isfinite(x32).all():
        raise ValueError("quantize: input contains NaN or Inf (pass nan='propagate' to allow)")
    f = get_format(fmt)
    fmax = np.float32(f.max)
    s, m = recipe_scales(block_amax(x32, block), recipe, fmax, x.dtype)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if m is None:
            scaled = x32 / expand_scales(s, block, x.shape)
        else:
            scaled = x32 * expand_scales(m, block, x.shape)
    return QTensor(satfinite(scaled, f), s.astype(np.float32), block, fmt, recipe)


def dequantize(q: QTensor, dtype=np.float32) -> np.ndarray:
    """values * scales broadcast over blocks.  float32 rounds the product once (RNE);
    dtype=np.float64 gives the exact product (fp8 x float32 needs at most 28 bits)."""
    if np.dtype(dtype) not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"dequantize dtype must be float32 or float64, got {dtype}")
    v = q.values.astype(dtype)
    return (v * expand_scales(q.scales.astype(dtype), q.block, q.values.shape)).astype(dtype)
