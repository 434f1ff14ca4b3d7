"""The layer-1 criteria of one output: correctness against the bit-exact reference on the
same quantized operands, then quantization impact against the unquantized float64
reference (module `fp8check.layers.op`).  One implementation behind both the gate and
`fp8check.testing`: a matmul output's criteria are the criteria engine's
(`layers.op.engine`) over the Problem held in memory, the same code that checks a
production-shape output chunk by chunk (`layers.op.streamed`); a quantizer's are
`quantizer_output_criteria`."""

from __future__ import annotations

from typing import Any

import numpy as np

from fp8check.contracts import MatmulClaims, QuantizerClaims
from fp8check.layers.op.chunks import InMemoryChunks
from fp8check.layers.op.engine import PlotHook, evaluate
from fp8check.layers.op.problem import Problem
from fp8check.layers.op.verdict import (
    BadOutput,
    bias_limits,
    criterion,
    element,
    returned,
    same_bits,
    shape_error,
)
from fp8check.measures import metrics
from fp8check.profiles import Profile
from fp8check.results.model import Criterion

__all__ = ["BadOutput", "PlotHook", "bias_limits", "criterion", "output_criteria",
           "quantizer_output_criteria", "returned", "same_bits", "shape_error"]


def output_criteria(
    out: np.ndarray, prob: Problem, profile: Profile, m: dict[str, Any], *,
    claims: MatmulClaims, plots: PlotHook | None = None,
) -> list[Criterion]:
    """Every layer-1 criterion that one output of a matmul contract decides: correctness
    (finite, bound_ratio, error_ratio, bias_z, and bit_exact when `accum` is declared and
    the problem's partials are exact) then impact.  The one implementation behind both
    the gate (`validate_case`) and `fp8check.testing`; metrics go into `m`, with the
    report's plot data (`m["plots"]`, made by `plots`) when `plots` is given and the
    problem has its unquantized operands.

    `out` must be a numpy array of the problem's output shape and dtype (BadOutput
    otherwise); `claims` are the kernel's, resolved (`MatmulClaims.resolved`): `accum` the
    accumulation recipe it claims, `acc_unit_roundoff` its accumulator's unit roundoff
    (the error bound's u).  A tensor-core accum
    ("deepgemm-hopper" with promotion every `hopper_interval` K elements,
    "deepgemm-blackwell" promoting every 128-wide block) declares that tensor core: the
    bound gains its truncation term and the criteria compare with the model
    (`accumulator.AccumulatorModel`).  The bound's underflow term is the problem's
    (`fp8check.measures.underflow`), the flush-to-zero one when the kernel declares
    `flushes_subnormals`: then outputs below 2^-126 are only held to that term, and `m`
    says so (`subnormal_range`).  Computed by `engine.evaluate` over the problem's
    compared rows as one chunk.
    """
    crit, _ = evaluate(out, InMemoryChunks(prob), profile, m, claims, plots=plots)
    return crit


def quantizer_output_criteria(
    values: np.ndarray, scales: np.ndarray, x: np.ndarray, claims: QuantizerClaims,
    m: dict[str, Any],
) -> list[Criterion]:
    """`quantizer_bit_exact`: (values, scales) bit for bit equal to quantize(x, block,
    recipe, fmt, nan="propagate") of the quantizer's `claims`, a NaN equal to any NaN
    (IEEE leaves a NaN's sign and payload to the implementation: a kernel's max, multiply
    and cast may return another NaN than numpy's, and no consumer can tell them apart),
    infinities by sign.  With the claims' `division_ulps` N > 0 (the kernel divides
    approximately, within N float32 ulps) the
    criterion is `quantizer_approx_division` instead: each scale one the recipe gives from
    a division within N ulps, each value the recipe's from the kernel's own scale
    (`fp8check.references.quant_approx`).  Records value/scale mismatch counts in `m`;
    the criterion's `worst` is the first mismatching value (index into x) or, with every
    value right, scale (index into the block grid, with "what": "scale"), its ulp
    distance to the recipe's own bits."""
    from fp8check.references import quant_approx, quantize

    block, recipe, fmt = claims.block, claims.recipe, claims.fmt
    division_ulps = claims.division_ulps
    ref = quantize(x, block, recipe, fmt, nan="propagate")
    if not np.isfinite(np.asarray(x, np.float32)).all():
        m["nonfinite_inputs"] = int(np.count_nonzero(~np.isfinite(np.asarray(x, np.float32))))
    values, scales = np.asarray(values), np.asarray(scales)
    scales_shaped = scales.shape == ref.scales.shape
    values_shaped = values.shape == ref.values.shape and values.dtype == ref.values.dtype
    s32 = np.asarray(scales, np.float32) if scales_shaped else scales
    scale_bad = value_bad = None
    if division_ulps:
        m["division_ulps"] = division_ulps
        if scales_shaped:
            scale_bad = quant_approx.scale_mismatches(s32, x, block, recipe, fmt,
                                                      division_ulps)
            if values_shaped:  # the codes are judged from the kernel's own scales
                value_bad = quant_approx.value_mismatches(values, s32, x, block, recipe,
                                                          fmt, division_ulps)
    else:
        if scales_shaped:
            scale_bad = _bits_differ(s32, ref.scales, np.uint32)
        if values_shaped:
            value_bad = _bits_differ(values, ref.values, np.uint8)
    ok = (scales.dtype == np.float32 and scale_bad is not None and value_bad is not None
          and not scale_bad.any() and not value_bad.any())
    n_bad, worst = 0, None
    if not ok and scale_bad is not None:
        m["scale_mismatches"] = n_scales = int(np.count_nonzero(scale_bad))
        n_bad += n_scales
        if n_scales:
            worst = _first_element(scale_bad, s32, ref.scales,
                                   metrics.ulp_distance(s32, ref.scales, np.float32))
            worst["what"] = "scale"
    if not ok and value_bad is not None:
        m["value_mismatches"] = n_values = int(np.count_nonzero(value_bad))
        n_bad += n_values
        if n_values:
            worst = _first_element(value_bad, values.astype(np.float32),
                                   ref.values.astype(np.float32),
                                   metrics.ulp_distance(values, ref.values, ref.values.dtype))
            worst["what"] = "value"
    if not ok and worst is None:  # wrong shape or dtype: say which
        m["quantizer_layout"] = (f"returned values {values.dtype}{list(values.shape)}, "
                                 f"scales {scales.dtype}{list(scales.shape)}; expected "
                                 f"{ref.values.dtype}{list(ref.values.shape)}, "
                                 f"float32{list(ref.scales.shape)}")
    name = "quantizer_approx_division" if division_ulps else "quantizer_bit_exact"
    return [criterion(name, ok, "==", True, n_bad=None if ok else n_bad,
                      bad_means="values and scales that differ", worst=worst)]


def _bits_differ(a: np.ndarray, b: np.ndarray, bits: type) -> np.ndarray:
    """Mask of the elements of a and b (same shape and float dtype, viewed as unsigned
    `bits`) whose bits differ, a NaN never differing from a NaN."""
    differ = a.view(bits) != b.view(bits)
    if differ.any():
        with np.errstate(invalid="ignore"):
            both_nan = np.isnan(a.astype(np.float32)) & np.isnan(b.astype(np.float32))
        differ &= ~both_nan
    return differ


def _first_element(bad: np.ndarray, out: np.ndarray, ref: np.ndarray,
                   ulps: np.ndarray) -> dict[str, Any]:
    """The description (`verdict.element`) of the first element `bad` marks."""
    idx = tuple(np.argwhere(bad)[0])
    return element(idx, out[idx], ref[idx], ulps[idx])
