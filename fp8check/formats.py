"""Floating-point format facts and the saturating cast.

Every fact here is derived from ml_dtypes' own `finfo`, so the table cannot drift from
the dtype the references compute with.  Units: `max`, `tiny` (smallest normal) and
`smallest_subnormal` are real values; `eps` is the spacing just above 1.0; `u` is the
unit roundoff of round-to-nearest (eps / 2).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numba
import numpy as np

from fp8check.bits import F64_MAX, exponent, pow2


@dataclass(frozen=True)
class Format:
    """One floating-point format as the references use it."""

    name: str
    dtype: np.dtype
    mantissa_bits: int  # explicit fraction bits
    max: float
    tiny: float  # smallest positive normal
    smallest_subnormal: float
    has_inf: bool

    @property
    def eps(self) -> float:
        return 2.0 ** -self.mantissa_bits

    @property
    def u(self) -> float:
        """Unit roundoff of round-to-nearest: half the spacing just above 1."""
        return 2.0 ** -(self.mantissa_bits + 1)

    @property
    def min_exponent(self) -> int:
        """Exponent of the smallest normal: tiny = 2**min_exponent."""
        return int(np.log2(self.tiny))


def _make(name: str, dtype, has_inf: bool) -> Format:
    info = ml_dtypes.finfo(dtype) if dtype not in (np.float32, np.float64) else np.finfo(dtype)
    return Format(
        name=name,
        dtype=np.dtype(dtype),
        mantissa_bits=int(info.nmant),
        max=float(info.max),
        tiny=float(info.smallest_normal),
        smallest_subnormal=float(info.smallest_subnormal),
        has_inf=has_inf,
    )


FORMATS: dict[str, Format] = {
    "e4m3fn": _make("e4m3fn", ml_dtypes.float8_e4m3fn, has_inf=False),
    "e5m2": _make("e5m2", ml_dtypes.float8_e5m2, has_inf=True),
    "bf16": _make("bf16", ml_dtypes.bfloat16, has_inf=True),
    "f32": _make("f32", np.float32, has_inf=True),
    "f64": _make("f64", np.float64, has_inf=True),
}

_ALIASES = {
    "float8_e4m3fn": "e4m3fn",
    "float8_e5m2": "e5m2",
    "bfloat16": "bf16",
    "float32": "f32",
    "float64": "f64",
}


def get_format(fmt: str | np.dtype | type | Format) -> Format:
    """The `Format` named by `fmt` (a name such as "e4m3fn", or a numpy/ml_dtypes dtype).

    Raises ValueError for anything else.
    """
    if isinstance(fmt, Format):
        return fmt
    if isinstance(fmt, str):
        key = _ALIASES.get(fmt, fmt)
        if key in FORMATS:
            return FORMATS[key]
        raise ValueError(f"unknown format {fmt!r}; expected one of {sorted(FORMATS)}")
    try:
        dt = np.dtype(fmt)
    except TypeError as e:
        raise ValueError(f"unknown format {fmt!r}") from e
    for f in FORMATS.values():
        if f.dtype == dt:
            return f
    raise ValueError(f"unsupported dtype {dt}; expected one of {sorted(FORMATS)}")


def satfinite(x: np.ndarray, fmt: str | np.dtype | Format = "e4m3fn") -> np.ndarray:
    """Cast `x` to `fmt` with round-to-nearest-even, saturating to +-max (cvt.rn.satfinite).

    The clamp happens in float32 before the cast, so the result never depends on the
    library's overflow behaviour (ml_dtypes and jax give NaN, torch eager saturates).
    +-inf saturate to +-max; NaN stays NaN.  Input must be float32 or narrower: a float64
    input raises ValueError, because float64 -> fp8 through float32 would round twice.
    Clamping to +-max before rounding is exact: any value in (max, max + ulp/2] rounds to
    max anyway, and anything larger overflows, which satfinite defines as max.
    """
    f = get_format(fmt)
    x = np.asarray(x)
    if x.dtype == np.float64:
        raise ValueError("satfinite: float64 input would be rounded twice; pass float32")
    x32 = x.astype(np.float32)
    return np.clip(x32, np.float32(-f.max), np.float32(f.max)).astype(f.dtype)


@numba.njit(cache=True, inline="always")
def ulp_of(x, emin, mant):
    """`ulp` of one float64 x in the format with smallest-normal exponent `emin` and `mant`
    fraction bits (a numba scalar core: the metric kernels inline it); NaN for NaN or inf.
    Exact: 2^(max(floor(log2|x|), emin) - mant) read and built from the bit fields."""
    if not abs(x) <= F64_MAX:
        return np.nan
    return pow2(max(exponent(x), emin) - mant)


@numba.njit(parallel=True, cache=True)
def _ulp_all(a, emin, mant):
    out = np.empty(a.size)
    for i in numba.prange(a.size):
        out[i] = ulp_of(a[i], emin, mant)
    return out


def ulp(x: np.ndarray, fmt: str | np.dtype | Format) -> np.ndarray:
    """Spacing of `fmt` at |x| (float64): the gap between |x| rounded down to `fmt` and the
    next larger value of `fmt`.  Below the smallest normal it is the subnormal spacing.

    For x exactly a power of two this is the spacing above x (the larger of the two gaps).
    NaN and inf give NaN.
    """
    f = get_format(fmt)
    a = np.asarray(x, dtype=np.float64)
    return _ulp_all(np.ascontiguousarray(a).ravel(), f.min_exponent, f.mantissa_bits).reshape(
        a.shape)
