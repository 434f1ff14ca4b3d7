"""Slow, independent oracles for the references: exact rationals and Python scalars only.

Nothing here uses numpy arithmetic or ml_dtypes casts, so an agreement between these and
the vectorized references is evidence, not a tautology.
"""

from __future__ import annotations

import math
from fractions import Fraction

# (significant bits, smallest normal exponent, largest finite) per format.
FORMATS = {
    "f64": (53, -1022, None),
    "f32": (24, -126, float.fromhex("0x1.fffffep127")),
    "bf16": (8, -126, float.fromhex("0x1.fep127")),
    "e4m3fn": (4, -6, 448.0),
    "e5m2": (3, -14, 57344.0),
}


def round_fraction(x: Fraction, fmt: str, saturate: bool = False) -> float:
    """Round the rational x to `fmt` with round-to-nearest-even (subnormals included).

    Overflow gives +-inf, or +-max when `saturate` (cvt.rn.satfinite)."""
    p, emin, fmax = FORMATS[fmt]
    if x == 0:
        return 0.0
    sign = -1 if x < 0 else 1
    a = abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    q = max(e - (p - 1), emin - (p - 1))
    scaled = a / Fraction(2) ** q
    r = scaled.numerator // scaled.denominator
    rem = scaled - r
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and r % 2 == 1):
        r += 1
    val = Fraction(r) * Fraction(2) ** q
    if fmax is not None and val > Fraction(fmax):
        return sign * (fmax if saturate else math.inf)
    return sign * float(val)


def fma_f32(a: float, b: float, c: float) -> float:
    return round_fraction(Fraction(a) * Fraction(b) + Fraction(c), "f32")


def rn32(x: Fraction) -> float:
    return round_fraction(x, "f32")


# Every e4m3fn code but the two NaNs (0x7F, 0xFF): subnormals, -0, +-448 included.
E4M3_CODES = [c for c in range(256) if c & 0x7F != 0x7F]


def e4m3_partials_rn32(a_codes, b_codes) -> list[list[float]]:
    """RN32 of the exact K-block partial sum_k a[i][k] b[k][j] of e4m3fn codes (nested
    lists or arrays of ints 0..255, no NaN codes): the values decoded from their bit fields
    into Fractions, summed exactly, rounded once by `round_fraction`."""
    def value(c: int) -> Fraction:
        e, f = (c >> 3) & 15, c & 7
        v = Fraction(f, 2**9) if e == 0 else Fraction(8 + f, 8) * Fraction(2) ** (e - 7)
        return -v if c & 0x80 else v

    a = [[value(int(c)) for c in row] for row in a_codes]
    bt = [[value(int(c)) for c in col] for col in zip(*b_codes, strict=True)]
    return [[rn32(sum(x * y for x, y in zip(row, col, strict=True))) for col in bt]
            for row in a]


F = Fraction


def _pow2_ceil_exponent(v: Fraction) -> int:
    """Smallest e with 2^e >= v (v > 0)."""
    e = v.numerator.bit_length() - v.denominator.bit_length()
    while F(2) ** e < v:
        e += 1
    while F(2) ** (e - 1) >= v:
        e -= 1
    return e


def _pow2_floor(v: float) -> float:
    e = math.frexp(v)[1] - 1
    return math.ldexp(1.0, e)


def _fp8(r: float, fmt: str) -> float:
    """The float32 intermediate r cast to fp8 (satfinite); a float32 -0 stays -0 (a Fraction
    has no signed zero, so the sign is put back)."""
    return math.copysign(round_fraction(F(r), fmt, saturate=True), r)


def quantize_block(xs: list[float], recipe: str, fmt: str, in_max: float):
    """One block, element by element: (list of fp8 values as floats, scale)."""
    fmax = F(FORMATS[fmt][2])
    amax = max(abs(F(v)) for v in xs)
    if recipe.startswith("transformer-engine"):
        if amax == 0:
            m = 1.0
        else:
            m = rn32(fmax / amax)
            if math.isinf(m):
                m = in_max
        if recipe.endswith("pow2"):
            m = _pow2_floor(m)
        s = rn32(1 / F(m))
        return [_fp8(rn32(F(v) * F(m)), fmt) for v in xs], s
    a = max(amax, F(rn32(F("1e-4"))))
    # -cuda: torch's CUDA `tensor / python_scalar` multiplies by the float32 reciprocal
    s = rn32(a * F(rn32(1 / fmax))) if recipe.endswith("-cuda") else rn32(a / fmax)
    if recipe == "deepseek-v3-ue8m0":
        # float32 log2: Python's float64 log2 (error < 2^-52 relative) rounded once more to
        # float32.  That second rounding is the float32 one except within 2^-52 of a float32
        # midpoint, and ceil only cares about the midpoint next to the integer k, which the
        # true log2 misses by more than 2^-30 relative (quant._log2_stays_at_k: 0.09 of a
        # mantissa step, at least 2^-23 / 8 absolute, against |log2 s| < 2^7).
        e = math.ceil(round_fraction(F(math.log2(s)), "f32"))
        return [_fp8(rn32(F(v) / F(2) ** e), fmt) for v in xs], \
            math.ldexp(1.0, e)
    if recipe.startswith("deepgemm-legacy"):
        m = rn32(F(rn32(1 / a)) * fmax)
        return [_fp8(rn32(F(v) * F(m)), fmt) for v in xs], s
    if recipe == "deepgemm-ue8m0":
        e = min(max(_pow2_ceil_exponent(F(s)), -126), 127)
        s = math.ldexp(1.0, e)
        return [_fp8(rn32(F(v) * F(2) ** -e), fmt) for v in xs], s
    if recipe == "deepseek-v3":
        return [_fp8(rn32(F(v) / F(s)), fmt) for v in xs], s
    inv = rn32(1 / F(s))
    return [_fp8(rn32(F(v) * F(inv)), fmt) for v in xs], s
