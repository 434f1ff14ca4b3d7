"""Quantizers that divide approximately, as a GPU does, and the bugs a check must still
catch (test-only; tests/test_quant_approx.py and the gate through user files).

`approx_div` is a deterministic stand-in for `div.full.f32`: RN(num / den) moved by up to
n float32 steps (the move taken from the element's position and a salt), kept inside
the n-ulp error bound |y - q| <= n ulp(q), ulp(q) = 2^(floor(log2 |q|) - 23), which is
checked here by cross-multiplication (|y den - num| <= n ulp(q) den, exact in float64:
y den has at most 48 bits and is within a factor of two of num), independently of
`fp8check.references.quant_approx.window`.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from fp8check.references import quant
from fp8check.references.quant import block_amax, expand_scales

FLOOR = np.float32(1e-4)
E4M3 = ml_dtypes.float8_e4m3fn


def _within(y: np.ndarray, num: np.ndarray, den: np.ndarray, n: int) -> np.ndarray:
    """|y - num/den| <= n ulp(num/den), exactly, for finite float32 num, den > 0, y."""
    q = np.abs(num.astype(np.float64) / den.astype(np.float64))
    _, e = np.frexp(np.where(q > 0, q, 1.0))
    ulp = np.ldexp(1.0, np.maximum(e - 1, -126) - 23)
    diff = np.abs(y.astype(np.float64) * den.astype(np.float64) - num.astype(np.float64))
    return diff <= n * ulp * den.astype(np.float64)


def approx_div(num, den, n: int, salt: int = 0) -> np.ndarray:
    """float32 num / den (broadcast; den > 0 finite) within n ulps of the exact quotient,
    deterministically off RN(num / den) by up to n steps (0 stays 0)."""
    num, den = np.broadcast_arrays(np.asarray(num, np.float32), np.asarray(den, np.float32))
    rn = (num / den).astype(np.float32)
    idx = np.arange(rn.size).reshape(rn.shape)
    k = (idx * 40503 + salt * 977) % (2 * n + 1) - n
    out = rn.copy()
    todo = (rn != 0) & np.isfinite(rn)
    while todo.any():  # shrink each move toward 0 until it is inside the bound
        mag = np.maximum(np.abs(rn).view(np.int32) + k, 0).astype(np.int32)
        y = np.copysign(mag.view(np.float32), rn)
        ok = todo & _within(y, num, den, n)
        out[ok] = y[ok]
        todo &= ~ok
        k = np.where(todo, k - np.sign(k), k)
    return out


def _cast(y: np.ndarray) -> np.ndarray:
    return np.clip(y, -448, 448).astype(E4M3)  # cvt.rn.satfinite


def _truncate(y: np.ndarray) -> np.ndarray:
    """The fp8 cast rounding toward zero instead of to nearest even."""
    y = np.clip(y, -448, 448)
    v = y.astype(E4M3)
    bits = v.view(np.uint8).copy()
    bits[np.abs(v.astype(np.float32)) > np.abs(y)] -= 1  # next smaller magnitude
    return bits.view(E4M3)


def approx_quantize(x, recipe: str, n: int = 2, salt: int = 0, block=(1, 128),
                    reciprocal=None, amax=None, cast=_cast):
    """`recipe` (deepgemm, deepgemm-ue8m0, deepgemm-legacy, deepseek-v3,
    deepseek-v3-ue8m0) with every division approximate: s from amax / 448 (or, with
    `reciprocal` r, s = RN(amax * r): Triton 3.9's code for DeepSeek-V3's `amax / 448.`),
    the ue8m0 recipes' power of two of it, then y = x / s, x * (1 / s) or, legacy,
    x * RN((1 / amax) * 448), and `cast` to fp8.  `amax` replaces the blocks' own."""
    x32 = np.asarray(x).astype(np.float32)
    a = np.maximum(block_amax(x32, block) if amax is None else amax, FLOOR)
    if reciprocal is None:
        s = approx_div(a, np.float32(448), n, salt)
    else:
        s = (a * np.float32(reciprocal)).astype(np.float32)
    if recipe == "deepgemm-ue8m0":
        s = quant._ue8m0(s)
    elif recipe == "deepseek-v3-ue8m0":
        s = quant._pow2_ceil_log2_f32(s)
    full = expand_scales(s, block, x32.shape)
    if recipe.startswith("deepseek-v3"):
        return cast(approx_div(x32, full, n, salt + 1)), s
    if recipe == "deepgemm-legacy":
        r = (approx_div(np.float32(1), a, n, salt + 1) * np.float32(448)).astype(np.float32)
    else:
        r = approx_div(np.float32(1), s, n, salt + 1)
    return cast(x32 * expand_scales(r, block, x32.shape)), s


def deepseek_v3(x, n: int = 2, salt: int = 0, reciprocal=None):
    """DeepSeek-V3's act_quant (1x128) with approximate division."""
    return approx_quantize(x, "deepseek-v3", n, salt, reciprocal=reciprocal)


def truncating(x):
    """deepseek_v3 whose fp8 cast truncates."""
    return approx_quantize(x, "deepseek-v3", cast=_truncate)


def amax_missing_last_column(x):
    """deepseek_v3 whose amax skips each 128-block's last element."""
    short = np.asarray(x).astype(np.float32)
    short[..., 127::128] = 0
    return approx_quantize(x, "deepseek-v3", amax=block_amax(short, (1, 128)))


def amax_in_bf16(x):
    """deepseek_v3 whose amax is rounded to bf16 before the division."""
    amax = block_amax(np.asarray(x).astype(np.float32), (1, 128))
    return approx_quantize(x, "deepseek-v3",
                           amax=amax.astype(ml_dtypes.bfloat16).astype(np.float32))


def gate_deepseek_v3(x):
    """The gate's call: fn(x) -> (values, scales)."""
    return deepseek_v3(x)


def gate_truncating(x):
    return truncating(x)
