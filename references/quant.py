"""Blockwise FP8 quantizer references, bit-exact to each recipe's source.

`quantize(x, block, recipe, fmt)` splits the last two dims of `x` into blocks of `block`
(any leading dims, e.g. experts, are independent), computes each block's amax over its
valid elements (a partial block at the edge covers only what exists: padding with zeros
never changes an amax), derives the recipe's scale and rounds.  All arithmetic is float32
round-to-nearest-even on the exact float32 image of the input (bf16 and f32 inputs upcast
exactly); the final cast saturates to the finite range before rounding (satfinite), so the
result never depends on a library's overflow behaviour.

Recipes (s = dequantization multiplier stored in `scales`, q = stored fp8 value; a =
max(amax, RN(1e-4)) where the recipe floors amax).  Which peer kernel each one is, with
commits and the peers' non-finite and all-zero-block behaviour: `docs/peers.md`.

=========================  ===================================================
deepgemm                   s = RN(a / fmax); q = sat(x * RN(1/s))
deepgemm-ue8m0             s = 2^e, e = ceil(log2(RN(a / fmax))) from the bits (biased
                           exponent + (mantissa != 0), clamped to [1, 254]); q = sat(x * 2^-e)
deepgemm-legacy            s = RN(a / fmax); q = sat(x * RN(RN(1/a) * fmax))
deepgemm-cuda              s = RN(a * RN(1/fmax)); q = sat(x * RN(1/s))
deepgemm-legacy-cuda       s = RN(a * RN(1/fmax)); q = sat(x * RN(RN(1/a) * fmax))
deepseek-v3                s = RN(a / fmax); q = sat(RN(x / s))
deepseek-v3-ue8m0          s = 2^e, e = ceil(RN32(log2(RN(a / fmax)))): float32 log2, which
                           returns the integer k for 2^k(1 + n 2^-23) while n <= N(k)
                           (`_LOG2_STAYS_AT_K`); q = sat(RN(x / s))
transformer-engine         m = RN(fmax / amax) (eps 0); amax == 0 or non-finite -> m = 1;
                           m = inf -> largest finite of x's dtype; s = RN(1 / m); q = sat(x * m)
transformer-engine-pow2    as above, then m keeps only sign and exponent (bits & 0xFF800000)
=========================  ===================================================

`fmax` is the format's largest finite value (448 for e4m3fn, 57344 for e5m2).

The `-cuda` recipes are DeepGEMM's casts (deep_gemm/utils/math.py, `sf = x_amax / 448.0`
and `x * (1.0 / sf)`; the legacy `x * (448.0 / x_amax)`) as torch evaluates them on a CUDA
tensor.  A tensor divided by a Python scalar is `div_true_kernel_cuda`
(pytorch/pytorch aten/src/ATen/native/cuda/BinaryDivTrueKernel.cu @ 0f57f050: "if the
second operand is a CPU scalar, compute a * reciprocal(b)"): `inv_b = opmath_t(1.0) / b`
on the host in float32, then `MulFunctor` on the device, so `x_amax / 448.0` is
RN(a * RN(1/448)), not the CPU kernel's RN(a / 448).  A Python scalar divided by a tensor
is `Tensor.__rtruediv__` (torch/_tensor.py: `self.reciprocal() * other`) on every device:
`reciprocal` is `1 / a` in device code (aten/src/ATen/native/cuda/UnaryFractionKernels.cu),
an IEEE division unless built with fast math, and the multiply by 1.0 is exact, so
`1.0 / sf` is RN(1/s) and `448.0 / x_amax` RN(RN(1/a) * 448) as on the CPU.  `deepgemm-ue8m0`
needs no CUDA twin: RN(a * RN(1/448)) and RN(a / 448) are never on the two sides of a
power of two (tests/test_quant_cuda.py shows it for every float32 a of one binade, which
covers every a: doubling a doubles both), so the bit-level ceil gives the same 2^e.

For the two ue8m0 recipes the product x * 2^-e (or quotient x / 2^e) is exact whenever it
stays a normal float32; if it falls below 2^-126 it is far below the smallest fp8 subnormal
and rounds to zero either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from fp8check.formats import get_format, satfinite

RECIPES = (
    "deepgemm",
    "deepgemm-ue8m0",
    "deepgemm-legacy",
    "deepgemm-cuda",
    "deepgemm-legacy-cuda",
    "deepseek-v3",
    "deepseek-v3-ue8m0",
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

    def leading(self, start: int, stop: int) -> QTensor:
        """Entries start:stop of the leading dim, values and scales alike: rows of a 2-D
        tensor of one-row blocks, or groups of a 3-D one.  ValueError for a 2-D tensor whose
        blocks span several rows (its scale rows are not its value rows)."""
        if self.values.ndim == 2 and self.block[0] != 1:
            raise ValueError(f"leading: rows of a {self.block} blocked tensor cannot be "
                             "taken with their scales")
        return QTensor(self.values[start:stop], self.scales[start:stop], self.block, self.fmt,
                       self.recipe)


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


def _log2_stays_at_k() -> np.ndarray:
    """N(k) indexed by the biased exponent k + 127: float32 log2(2^k (1 + n 2^-23)) is k
    exactly for 0 <= n <= N(k) and above k (so its ceil is k + 1) for larger n.

    Why, for a correctly rounded float32 log2 (torch's agrees: tests/test_quant_peers.py
    compares every n within 80 ulps of every power of two): log2 s = k + t with
    t = log2(1 + n 2^-23) in (0, 1), irrational for n > 0 (so never a rounding tie).  The
    result is k iff t < g/2, g the gap from k to its float32 neighbour toward k + t:
    2^(E-23) with E = floor(log2 |k|), except 2^(E-24) when k < 0 and |k| is a power of two
    (k + t is then inside the finer binade below |k|).  For k = 0 the result is t itself, a
    nonzero float32, so only n = 0 stays.  t < g/2 <=> n < 2^23 (2^(g/2) - 1)
    = c ln2 (1 + eps) with c = 2^22 g (a power of two, 1/4 .. 32) and 0 < eps < g ln2 / 2
    < 2^-18.  c ln2 for c = 1/4 .. 32 has fractional parts 0.17, 0.35, 0.69, 0.39, 0.77,
    0.55, 0.09, 0.18: at least 0.09 above the integer below and 0.22 below the next, far
    more than c ln2 eps (< 2^-13, upward) or float64's error in c * log(2); so
    N(k) = floor(c ln2), computed here in float64.
    """
    table = np.zeros(256, np.int64)
    for biased in range(1, 255):
        k = biased - 127
        if k == 0:
            continue
        e = abs(k).bit_length() - 1
        finer_below = k < 0 and abs(k) == 1 << e
        table[biased] = math.floor(2.0 ** (e - 2 if finer_below else e - 1) * math.log(2))
    return table


_LOG2_STAYS_AT_K = _log2_stays_at_k()


def _pow2_ceil_log2_f32(s: np.ndarray) -> np.ndarray:
    """exp2(ceil(log2(s))) as float32 log2, ceil and exp2 evaluate it, from the bits of s.

    s is a positive normal float32 (the 1e-4 amax floor keeps s = a / fmax >= 2^-30) or
    non-finite: +inf gives +inf and NaN gives NaN, as log2, ceil and exp2 do.  exp2 of an
    integer in [-126, 127] is exact, so the result is 2^(k + (n > N(k))).
    """
    bits = s.view(np.uint32)
    biased = ((bits >> 23) & 0xFF).astype(np.int64)
    n = (bits & 0x7FFFFF).astype(np.int64)
    biased = biased + (n > _LOG2_STAYS_AT_K[biased])
    pow2 = (np.minimum(biased, 255).astype(np.uint32) << 23).view(np.float32)  # 255: inf/NaN
    return np.where(np.isfinite(s), pow2, s)


def recipe_scales(amax: np.ndarray, recipe: str, fmax: np.float32, in_dtype) -> tuple:
    """(dequant scale s, quant multiplier m) per block, float32; m is None for the recipes
    that divide x by s instead of multiplying."""
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
        a = np.maximum(amax, _DEEPGEMM_AMAX_FLOOR)
        s = (a * (np.float32(1) / fmax) if recipe.endswith("-cuda") else a / fmax)
        s = s.astype(np.float32)
        if recipe == "deepgemm-ue8m0":
            s = _ue8m0(s)
            return s, (np.float32(1) / s).astype(np.float32)  # exact: s is a power of two
        if recipe == "deepseek-v3-ue8m0":
            return _pow2_ceil_log2_f32(s), None
        if recipe == "deepseek-v3":
            return s, None
        if recipe.startswith("deepgemm-legacy"):  # x * (448.0 / amax): __rtruediv__ is
            # amax.reciprocal() * 448, two roundings, not one division
            return s, ((np.float32(1) / a) * fmax).astype(np.float32)
        return s, (np.float32(1) / s).astype(np.float32)


def quantize(
    x,
    block: tuple[int, int] = (1, BLOCK),
    recipe: str = "deepgemm",
    fmt: str = "e4m3fn",
    nan: str = "raise",
) -> QTensor:
    """Quantize `x` (float32 or bfloat16, shape [..., R, C]) blockwise with `recipe`.

    Returns a QTensor whose `values` are `fmt` (ml_dtypes) and whose `scales` are the
    float32 dequantization multipliers, shape [..., ceil(R/bR), ceil(C/bC)].
    NaN or Inf in `x` raises ValueError unless nan="propagate", in which case the recipe's
    arithmetic runs as written, with what the peer's own code gives (a NaN block gets a NaN
    scale under deepgemm, but 2^127 under deepgemm-ue8m0, whose bit-level ceil clamps
    the exponent field, and 1 under transformer-engine: `docs/peers.md`'s table)."""
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
