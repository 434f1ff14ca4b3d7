"""What a quantizer recipe allows when the kernel's float32 divisions are approximate.

A GPU kernel may divide approximately: Triton lowers float32 `/` to `div.full.f32` (the PTX
ISA: at most 2 ulp of error) unless it calls `tl.math.div_rn`, and Triton 3.9's optimized
LLVM IR turns a division by a constant (`amax / 448.`) into `amax * div.approx.f32(1.0,
448.0)` (docs/peers.md, "On the GPU").  Such a kernel's scales and codes are not a
recipe's bits.  A kernel that declares `division_ulps = N` says that each division of its
recipe returns a float32 y within N ulps of the exact quotient q: |y - q| <= N ulp(q),
with ulp(q) = 2^(floor(log2 |q|) - 23) (2^-149 below 2^-126), float32's spacing in q's
binade.  The check then demands:

* scales (`scale_mismatches`): each block's scale is what the recipe makes of some float32
  within N ulps of the block's exact pre-scale p (p = a / fmax, or a * RN(1/fmax) for the
  `-cuda` recipes, with a = max(amax, RN(1e-4)) of the block's exact amax): that float32
  itself, or for the ue8m0 recipes the power of two the recipe's rounding gives it.  A
  block whose amax is NaN or inf has exactly the recipe's scale (a NaN equal to any NaN).
* codes (`value_mismatches`): each value is what the recipe's q rule gives from the
  kernel's own block scale s_k with each of that rule's divisions anywhere in its window:
  sat(y) in fp8 (RNE) for y within N ulps of x / s_k (`deepseek-v3*`); sat(RN(x * r)) for
  r within N ulps of 1 / s_k (`deepgemm`, `deepgemm-cuda`, `deepgemm-ue8m0`); r' = RN(r *
  fmax) for r within N ulps of 1 / a (the `deepgemm-legacy*` multiplier, which does not
  use s).  The sign is x's and a NaN is where the rule with exact division gives NaN.

Why this is the strictest demand a correct kernel passes: its divisions are within N ulps
by its declaration, and each allowed set is exactly what such divisions can produce.  The
q rules are monotone in the quotient, so the allowed codes are those between the codes of
the window's two ends: one code, or two neighbours where the window straddles a rounding
midpoint of the fp8 grid (rare on real data, everywhere on data built on midpoints).
Demanding the codes of exact division instead would fail a correct Triton kernel on those
elements.  What still fails: a code off by one anywhere but in such a straddle;
truncation instead of RNE (off by one wherever the discarded part exceeds half an fp8 step,
which a window of a few float32 ulps almost never reaches); a wrong block or amax (its
scale leaves the window, unless the amax is within about N float32 ulps of the right one,
which no check can tell apart from the division's own error); NaN for a number or a number
for NaN.  `transformer-engine*` derive the scale from the multiplier 448/amax, whose
value the kernel does not return: no approximate claim is taken for them (TE's kernel and
torchao divide with `__fdiv_rn` / `tl.div_rn`: declare 0).

Exactness: everything is computed in float64 from float32 operands.  A quotient x / s of
float32s is not a float64 in general, but RN64(x / s) lies on the same side as x / s of
every number t of p <= 28 significant bits: if x / s != t, x - t s is a nonzero multiple of
ulp(t) ulp(s), so |x / s - t| >= ulp(t) ulp(s) / s > 2^(-p-24) |t| >= 2^-52 |t|, more than
RN64's error of 2^-53 |x / s|.  The bounds t +- N ulp(q) of the float32 candidates t have at
most 26 bits, and a product a * RN(1/fmax) of two float32s is exact in float64.
tests/test_quant_approx.py checks the windows against `fractions.Fraction`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fp8check.formats import get_format, satfinite
from fp8check.references.quant import (
    _DEEPGEMM_AMAX_FLOOR,
    RECIPES,
    _pow2_ceil_log2_f32,
    _ue8m0,
    block_amax,
    expand_scales,
    recipe_scales,
)

# Recipes whose scale is a division of the amax (or the -cuda product): the ones a claim
# of approximate division applies to.
APPROX_RECIPES = tuple(r for r in RECIPES if not r.startswith("transformer-engine"))
MAX_DIVISION_ULPS = 16
_DIVIDING = ("deepseek-v3", "deepseek-v3-ue8m0")  # q = sat(x / s); the others multiply
_POST: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "deepgemm-ue8m0": _ue8m0, "deepseek-v3-ue8m0": _pow2_ceil_log2_f32}
_F32_MAX = float(np.finfo(np.float32).max)


def check_division_ulps(recipe: str | None, ulps: object) -> None:
    """ValueError (one line) unless `ulps` is an int in [0, MAX_DIVISION_ULPS] and, when
    it is not 0, `recipe` (None: not known yet, not checked) is one of APPROX_RECIPES."""
    if not isinstance(ulps, int) or isinstance(ulps, bool) or not (
            0 <= ulps <= MAX_DIVISION_ULPS):
        raise ValueError(f"division_ulps must be an integer from 0 to {MAX_DIVISION_ULPS}, "
                         f"got {ulps!r}")
    if ulps and recipe is not None and recipe not in APPROX_RECIPES:
        raise ValueError(f"division_ulps applies to the recipes whose scale divides the "
                         f"amax ({', '.join(APPROX_RECIPES)}), not {recipe!r}")


def window(q: np.ndarray, ulps: int) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) float32: the least and the greatest float32 y >= 0 with |y - |q|| <=
    ulps * ulp(|q|), per element of q, the float64 image of an exact quotient of float32s
    or an exact product (module docstring).  0, inf and NaN map to themselves; a |q|
    beyond the float32 range (a division that overflows) to inf.  ulps >= 1."""
    if ulps < 1:
        raise ValueError(f"window: ulps must be >= 1, got {ulps}")
    a = np.abs(np.asarray(q, np.float64))
    regular = np.isfinite(a) & (a > 0) & (a <= _F32_MAX)
    aa = np.where(regular, a, 1.0)
    _, e = np.frexp(aa)  # aa = f 2^e with f in [0.5, 1): floor(log2 aa) = e - 1
    width = ulps * np.ldexp(1.0, np.maximum(e - 1, -126) - 23)
    start = aa.astype(np.float32).view(np.uint32).astype(np.int64)  # RN32(q): inside
    lo, hi = np.full(a.shape, np.inf), np.zeros(a.shape)
    # Candidates: from RN32(q), N + 1 steps of q's spacing, or 2N + 2 of the finer one below.
    for step in range(-2 * ulps - 2, 2 * ulps + 3):
        t = np.clip(start + step, 0, 0x7F7FFFFF).astype(np.uint32).view(np.float32)
        t64 = t.astype(np.float64)
        inside = (t64 - width <= aa) & (aa <= t64 + width)
        lo = np.where(inside, np.minimum(lo, t64), lo)
        hi = np.where(inside, np.maximum(hi, t64), hi)
    beyond = np.isfinite(a) & (a > _F32_MAX)
    lo = np.where(regular, lo, np.where(beyond, np.inf, a))
    hi = np.where(regular, hi, np.where(beyond, np.inf, a))
    return lo.astype(np.float32), hi.astype(np.float32)


def _floored_amax(x32: np.ndarray, block: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    amax = block_amax(x32, block)
    return amax, np.maximum(amax, _DEEPGEMM_AMAX_FLOOR)


def scale_mismatches(scales: np.ndarray, x: np.ndarray, block: tuple[int, int], recipe: str,
                     fmt: str, ulps: int) -> np.ndarray:
    """Mask over the block grid of the kernel's float32 `scales` that no division within
    `ulps` ulps gives (module docstring); `scales` has the recipe's scale shape."""
    check_division_ulps(recipe, ulps)
    x32 = np.asarray(x).astype(np.float32)
    fmax = np.float32(get_format(fmt).max)
    amax, a = _floored_amax(x32, block)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        pre = (a.astype(np.float64) * float(np.float32(1) / fmax) if recipe.endswith("-cuda")
               else a.astype(np.float64) / float(fmax))
        lo, hi = window(pre, ulps)
        post = _POST.get(recipe, lambda s: s)
        sk = np.asarray(scales, np.float32)
        allowed = (post(sk) == sk) & (post(lo) <= sk) & (sk <= post(hi))
        ref = recipe_scales(amax, recipe, fmax, np.asarray(x).dtype)[0]
    same = (sk.view(np.uint32) == ref.view(np.uint32)) | (np.isnan(sk) & np.isnan(ref))
    return np.where(np.isfinite(amax), ~allowed, ~same)


def value_mismatches(values: np.ndarray, scales: np.ndarray, x: np.ndarray,
                     block: tuple[int, int], recipe: str, fmt: str, ulps: int) -> np.ndarray:
    """Mask over x of the kernel's fp8 `values` that the recipe's q rule does not give from
    the kernel's own `scales` (float32, the recipe's scale shape) with divisions within
    `ulps` ulps (module docstring); `values` has the recipe's fp8 dtype and x's shape."""
    check_division_ulps(recipe, ulps)
    f = get_format(fmt)
    fmax = np.float32(f.max)
    x32 = np.asarray(x).astype(np.float32)
    sk = np.asarray(scales, np.float32)
    s_full = expand_scales(sk, block, x32.shape)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if recipe in _DIVIDING:
            lo, hi = window(x32.astype(np.float64) / s_full.astype(np.float64), ulps)
            exact = x32 / s_full
        else:
            r0: np.ndarray  # the multiplier with exact division: its sign and NaN
            if recipe.startswith("deepgemm-legacy"):
                a = _floored_amax(x32, block)[1]
                r_lo, r_hi = (r * fmax for r in window(1.0 / a.astype(np.float64), ulps))
                r0 = (np.float32(1) / a) * fmax
            else:
                r_lo, r_hi = window(1.0 / sk.astype(np.float64), ulps)
                r0 = np.float32(1) / sk
            ax = np.abs(x32)
            lo = ax * expand_scales(r_lo.astype(np.float32), block, x32.shape)
            hi = ax * expand_scales(r_hi.astype(np.float32), block, x32.shape)
            exact = x32 * expand_scales(r0.astype(np.float32), block, x32.shape)
        code_lo = satfinite(lo, f).astype(np.float32)
        code_hi = satfinite(hi, f).astype(np.float32)
        got = np.asarray(values).astype(np.float32)
        inside = (~np.isnan(got) & (np.signbit(got) == np.signbit(exact))
                  & (np.abs(got) >= code_lo) & (np.abs(got) <= code_hi))
    return np.where(np.isnan(exact), ~np.isnan(got), ~inside)
