"""How a layer-1 criterion is made: what each one measures (`MEANINGS`), the `Criterion` of
a value against its limit, the description of one element that `Criterion.worst` holds,
and the checks of what a kernel returned (`shape_error`, `BadOutput`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fp8check.contracts import NUMPY_DTYPES
from fp8check.measures import metrics
from fp8check.profiles import Profile
from fp8check.results.model import Criterion

# What each criterion measures (`Criterion.meaning`) and what its n_bad counts.
MEANINGS = {
    "finite": "NaN/Inf where the exact reference is finite, finite where it is not, or "
              "NaN, +Inf, -Inf other than the reference's",
    "bound_ratio": "|out - exact| over Higham's bound for any valid float32 summation order",
    "error_ratio": "rms error over that of a naive same-precision implementation",
    "bias_z": "t-statistic of the error toward (-) or away from (+) zero (truncation "
              "instead of rounding is one-signed)",
    "bias_z_signed": "t-statistic of the error toward -inf (-) or +inf (+) (a directed "
                     "rounding mode is one-signed)",
    "bit_exact": "bit-for-bit equal to the declared accumulation recipe",
    "deterministic": "two runs give the same bits",
    "quantizer_bit_exact": "values and scales bit-for-bit equal to the recipe",
    "quantizer_approx_division": "scales within the declared division ulps of the "
                                 "recipe's; values the recipe's from the kernel's own "
                                 "scales, any quotient within those ulps",
    "impact_sqnr_db": "SQNR (dB) vs the unquantized float64 reference, row-normalised",
    "impact_calc_diff": "calc_diff vs the unquantized float64 reference, row-normalised",
    "impact_allclose": "fraction outside allclose vs the unquantized reference",
}


def criterion(name: str, value: Any, relation: Any, limit: Any, **kw: Any) -> Criterion:
    """A layer-1 correctness or impact criterion, its meaning from MEANINGS."""
    question = "impact" if name.startswith("impact_") else "correctness"
    return Criterion.check(name, question, value, relation, limit,
                           meaning=MEANINGS[name], **kw)


def bias_limits(profile: Profile) -> tuple[tuple[str, metrics.BiasMode, float], ...]:
    """(criterion, `metrics.bias_z` mode, limit) of the two bias criteria."""
    return (("bias_z", "magnitude", profile.max_abs_bias_z),
            ("bias_z_signed", "signed", profile.max_abs_bias_z_signed))


def element(index: Sequence[Any], out: Any, ref: Any, ulp: Any,
            bound: float | None = None) -> dict[str, Any]:
    """The description of one element that Criterion.worst holds: its index in the output,
    the kernel's and the reference's values, their ULP distance and the element's error
    bound (None where it is not the criterion's)."""
    return {"index": [int(i) for i in index], "out": float(out), "ref": float(ref),
            "ulp": int(ulp), "bound": bound}


def one_ulp(out: Any, ref: Any, out_dtype: np.dtype) -> int:
    """The ULP distance of scalar `out` to scalar `ref` rounded to `out_dtype` (through
    one-element arrays: ulp_distance's integer arithmetic warns on numpy scalars)."""
    return int(metrics.ulp_distance(np.asarray([out]), np.asarray([ref]).astype(out_dtype),
                                    out_dtype)[0])


class BadOutput(ValueError):
    """The kernel returned the wrong type, shape or dtype."""


def returned(out: Any) -> str:
    """What a kernel returned, for messages: "None", "a list", "an int"."""
    if out is None:
        return "None"
    name = type(out).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def shape_error(out: Any, expected: tuple[int, ...], out_dtype: str) -> str | None:
    """What is wrong with a kernel's output `out` (as `call_kernel` returns it), in
    words ("returned a list, expected an array of shape ..."), or None."""
    if not isinstance(out, np.ndarray):
        return (f"returned {returned(out)}, expected an array of shape {expected} "
                f"{NUMPY_DTYPES[out_dtype]}")
    if out.shape != expected:
        return f"returned shape {out.shape}, expected {expected}"
    if out.dtype != NUMPY_DTYPES[out_dtype]:
        return f"returned dtype {out.dtype}, expected {NUMPY_DTYPES[out_dtype]}"
    return None


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Same shape, dtype and bytes."""
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()
