"""The layer-1 criteria of one output: correctness against the bit-exact reference on the
same quantized operands, then quantization impact against the unquantized float64
reference (module `fp8check.layers.op`).  One implementation behind both the gate and
`fp8check.testing`."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from fp8check import metrics
from fp8check.contracts import NUMPY_DTYPES
from fp8check.layers.op.problem import Problem
from fp8check.profiles import REF_ATOL, REF_RTOL, Profile, sqnr_band
from fp8check.references.casts import rounded, to_float64
from fp8check.references.gmm import TENSOR_CORE_ACCUMS
from fp8check.results.model import Criterion

ULP_BINS = (0, 1, 2, 4, 8, 64)

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
_NOT_ROUNDED = "elements not correctly rounded"
_OUTSIDE_ALLCLOSE = "elements outside allclose(atol, rtol)"

# Plot data of one output, made by the report stage (`fp8check.reports.plotdata.plot_data`):
# (compared rows of the output, problem, accumulator unit roundoff, ULP distances to
# RN(exact), bound ratios, the bound's declared-accumulator term or None) -> JSON-ready
# dict.  Layers never import the reports.
PlotHook = Callable[[np.ndarray, Problem, float, np.ndarray, np.ndarray, np.ndarray | None],
                    dict[str, Any]]


def criterion(name: str, value: Any, relation: Any, limit: Any, **kw: Any) -> Criterion:
    """A layer-1 correctness or impact criterion, its meaning from MEANINGS."""
    question = "impact" if name.startswith("impact_") else "correctness"
    return Criterion.check(name, question, value, relation, limit,
                           meaning=MEANINGS[name], **kw)


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
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _finite_mismatches(out: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """Mask of the elements where the kernel is non-finite and the reference is not, or
    vice versa, or both are infinite with different signs."""
    if np.isfinite(out).all() and np.isfinite(exact).all():
        return np.zeros(out.shape, bool)
    o, e = to_float64(out), exact
    nan_bad = np.isnan(o) != np.isnan(e)
    inf_bad = np.isinf(o) != np.isinf(e)
    sign_bad = np.isinf(o) & np.isinf(e) & (np.sign(o) != np.sign(e))
    return nan_bad | inf_bad | sign_bad


def _ulp_histogram(ulps: np.ndarray) -> dict[str, int]:
    hist: dict[str, int] = {}
    lo = 0
    for hi in ULP_BINS[1:]:
        hist[f"{lo}" if hi == lo + 1 else f"{lo}-{hi - 1}"] = int(
            np.count_nonzero((ulps >= lo) & (ulps < hi)))
        lo = hi
    hist[f">={lo}"] = int(np.count_nonzero(ulps >= lo))
    return hist


def _element(idx: tuple[Any, ...] | np.ndarray, out: np.ndarray, ref: np.ndarray,
             ulps: np.ndarray, bound: float | None = None) -> dict[str, Any]:
    """The description of one element that Criterion.worst holds."""
    idx = tuple(int(i) for i in idx)
    return {"index": list(idx), "out": float(out[idx]), "ref": float(ref[idx]),
            "ulp": int(ulps[idx]), "bound": bound}


def _worst_ulp(out: np.ndarray, ref: np.ndarray, ulps: np.ndarray) -> dict[str, Any] | None:
    """The element furthest (in ulps) from ref, None for an empty output."""
    if not ulps.size:
        return None
    return _element(np.unravel_index(np.argmax(ulps), ulps.shape), out, ref, ulps)


def _finite_criterion(o: np.ndarray, exact: np.ndarray, out_np: np.dtype,
                      m: dict[str, Any]) -> Criterion:
    """`finite`: the compared rows `o` non-finite exactly where `exact` is, with the same
    infinities (NaN payloads and signs are not compared: IEEE leaves them unspecified)."""
    mask = _finite_mismatches(o, exact)
    bad = int(np.count_nonzero(mask))
    m["nonfinite_mismatches"] = bad
    first_bad = None
    if bad:
        idx = tuple(int(i) for i in np.argwhere(mask)[0])
        # one-element arrays: ulp_distance's integer arithmetic warns on numpy scalars
        ulps = metrics.ulp_distance(o[idx][None], exact[idx][None].astype(out_np), out_np)
        first_bad = {"index": list(idx), "out": float(o[idx]), "ref": float(exact[idx]),
                     "ulp": int(ulps[0]), "bound": None}
    return criterion("finite", bad, "==", 0, n_bad=bad,
                     bad_means="elements finite, NaN or +-Inf unlike the exact value",
                     worst=first_bad)


def _correctness(
    prob: Problem, o: np.ndarray, exact: np.ndarray, exact_rounded: np.ndarray,
    naive: np.ndarray, ulps: np.ndarray, ratio: np.ndarray, profile: Profile,
    m: dict[str, Any], accum: str | None, model_ref: np.ndarray | None,
    kept: np.ndarray | None,
) -> list[Criterion]:
    """The correctness criteria but `finite` of the compared rows `o` of an output, given
    the exact values and RN(exact) in the output's dtype, the naive baseline, their ULP
    distances to RN(exact) and bound ratios.  `kept`: None when every exact value is
    finite, else the mask of the elements whose exact value is (the others are
    neutralised to zero in every array here, see `_neutralised`, and bias_z takes only
    the kept ones).

    `model_ref`: the declared hardware accumulator's result (a tensor-core recipe of
    `references.gmm.TENSOR_CORE_ACCUMS`), when the kernel declares one.  Its truncation
    is the hardware's, not a bug: error_ratio then compares the kernel's error with the
    model's own (the naive computation on that hardware), and bias_z measures the
    kernel's error against the model, not against the exact value.  Why that is the
    right expectation: a kernel that computes the declared accumulator has error
    (out - exact) = (model - exact) + (out - model), the first term the declared
    truncation (one-signed by construction) and the second zero (bit-exact) or the
    zero-mean float32 rounding of a different promotion order; any further truncation (a
    narrower accumulator, a truncating cast) is a one-signed part of (out - model) and
    shows in the statistic as it would against exact."""
    out_np = NUMPY_DTYPES[prob.out_dtype]
    n_off = int(np.count_nonzero(ulps))  # elements not correctly rounded
    worst_off = _worst_ulp(o, exact, ulps)
    crit: list[Criterion] = []

    worst = float(np.max(ratio)) if ratio.size else 0.0
    m["bound_ratio_max"] = worst
    worst_el = None
    if ratio.size:
        arg = np.unravel_index(np.argmax(ratio), ratio.shape)
        m["bound_ratio_argmax"] = [int(i) for i in arg]
        err = abs(float(o[arg]) - float(exact[arg]))
        # bound = |out - exact| / ratio; unknown where out is not finite or exact equals out
        bound = err / worst if np.isfinite(worst) and worst > 0 else None
        worst_el = _element(arg, o, exact, ulps, bound)
    crit.append(criterion("bound_ratio", worst, "<=", profile.max_bound_ratio,
                          n_bad=int(np.count_nonzero(ratio > profile.max_bound_ratio)),
                          bad_means="elements over the bound", worst=worst_el))

    er = float(metrics.error_ratio(o, exact, naive if model_ref is None else model_ref))
    m["error_ratio"] = er
    crit.append(criterion("error_ratio", er, "<=", profile.max_error_ratio, n_bad=n_off,
                          bad_means=_NOT_ROUNDED, worst=worst_off))

    # Against the correctly rounded exact value: a correct RNE output has zero-mean error
    # against it whatever the data, while against the unrounded exact value RNE itself
    # shows a data-determined bias when the data has few distinct values (near-max
    # blocks, M_g = 1 outer products).  Rows and (group, column tile) are crossed clusters:
    # they share the operands' roundings (`metrics.bias_z_crossed`).  Both signs:
    # "magnitude" (toward or away from zero: truncation) and "signed" (toward -inf or
    # +inf: a directed rounding mode, whose errors cancel in the magnitude statistic on
    # mixed-sign data).
    groups, n_groups = metrics.row_groups(o.shape, prob.args[-1])
    ref = exact_rounded if model_ref is None else model_ref
    finite_out = bool(np.all(np.isfinite(o if kept is None else o[kept])))
    for name, mode, limit in bias_limits(profile):
        try:  # NaN or Inf in out: inf (`finite` fails the output too)
            z = metrics.bias_z_crossed(metrics.bias_sums(
                o, ref, groups, n_groups, mode=mode, block=prob.rhs_block_columns,
                keep=kept)) if finite_out else math.inf
        except ValueError:  # a t-statistic needs two rows and two columns
            m["bias_z_note"] = ("fewer than 2 rows or (group, column tile) clusters: bias "
                                "not testable")
            break
        m[name] = z
        crit.append(criterion(name, z, "|x|<=", limit, n_bad=n_off,
                              bad_means=_NOT_ROUNDED, worst=worst_off))

    m["ulp_max_vs_exact"] = int(ulps.max(initial=0))
    m["ulp_histogram_vs_exact"] = _ulp_histogram(ulps)
    ref_close = metrics.allclose_report(o, exact, REF_ATOL, REF_RTOL)
    m["ref_allclose_fail_frac"] = float(ref_close.frac_fail)

    # The hardware model is bit-exact by definition on every case; the float32 recipes
    # only where every partial is exact in float32.
    if accum is not None and (prob.exact_partials or model_ref is not None):
        if model_ref is None:
            ref = _neutralised(prob.accum_ref(accum, prob.out_dtype)[:prob.rows], kept)
        else:
            ref = model_ref
        d = metrics.ulp_distance(o, ref, out_np)
        mism = int(np.count_nonzero(d))
        m["bit_exact_mismatches"] = mism
        m["bit_exact_accum"] = accum
        crit.append(criterion("bit_exact", mism, "==", 0, n_bad=mism,
                              bad_means="elements whose bits differ",
                              worst=_worst_ulp(o, ref, d) if mism else None))
    return crit


def _row_normalised(
    out: np.ndarray, ref: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """out and ref with each row (last axis) divided by the reference row's RMS; rows whose
    reference is all zero are dropped (the third array: flat indices of the rows kept).
    Per-token (1x128) quantization makes the row the unit of quantization error: without
    this a few large rows (lognormal-rows spans e^+-6) decide a global SQNR alone and it
    swings by several dB between seeds."""
    o, r = out.reshape(-1, out.shape[-1]), ref.reshape(-1, ref.shape[-1])
    rms = np.sqrt(np.mean(np.square(r), axis=1))
    keep = rms > 0
    return o[keep] / rms[keep, None], r[keep] / rms[keep, None], np.flatnonzero(keep)


def _impact(prob: Problem, out: np.ndarray, profile: Profile, m: dict[str, Any]) -> list[Criterion]:
    if prob.unquantized is None:
        m["impact_note"] = "unquantized operands not given: impact not measured"
        return []
    sl = slice(0, prob.rows)
    o, ref = to_float64(out[sl]), prob.unquantized[sl]
    n_nonfinite = int(np.count_nonzero(~np.isfinite(ref)))
    if n_nonfinite:
        m["impact_note"] = (f"unquantized reference non-finite at {n_nonfinite} elements (NaN "
                            "or Inf inputs): quantization impact is not defined there, not "
                            "measured; propagation is decided by `finite`")
        return []
    if not np.any(ref):
        m["impact_note"] = "unquantized reference is all zero: nothing to measure"
        return []
    m["impact_sqnr_db_global"] = float(metrics.sqnr_db(ref, o))
    # SQNR, calc_diff and allclose on row-normalised values: atol is then in units of the
    # row's RMS (an absolute tolerance presumes unit-scale rows).
    on, rn, kept = _row_normalised(o, ref)
    sqnr = float(metrics.sqnr_db(rn, on))
    cd = float(metrics.calc_diff(on, rn))
    close = metrics.allclose_report(on, rn, profile.impact_atol, profile.impact_rtol)
    m.update(impact_sqnr_db=sqnr, impact_band=sqnr_band(sqnr), impact_calc_diff=cd,
             impact_allclose_fail_frac=float(close.frac_fail))
    if prob.impact_not_gated is not None:
        m["impact_not_gated"] = prob.impact_not_gated
        return []
    worst = None
    if close.worst_index is not None:
        # back from (kept row, column) of the normalised view to the output's own index
        i, j = close.worst_index
        idx = (*np.unravel_index(kept[i], o.shape[:-1]), j)
        out_np = NUMPY_DTYPES[prob.out_dtype]
        # one-element arrays: ulp_distance's integer arithmetic warns on numpy scalars
        ulp = metrics.ulp_distance(o[idx][None], ref[idx][None].astype(out_np), out_np)[0]
        worst = {"index": [int(v) for v in idx], "out": float(o[idx]), "ref": float(ref[idx]),
                 "ulp": int(ulp), "bound": None}
    return [
        criterion("impact_sqnr_db", sqnr, ">=", profile.min_sqnr_db, n_bad=close.n_fail,
                  bad_means=_OUTSIDE_ALLCLOSE, worst=worst),
        criterion("impact_calc_diff", cd, "<=", profile.max_calc_diff, n_bad=close.n_fail,
                  bad_means=_OUTSIDE_ALLCLOSE, worst=worst),
        criterion("impact_allclose", float(close.frac_fail), "<=",
                  profile.impact_max_fail_frac, n_bad=close.n_fail,
                  bad_means=_OUTSIDE_ALLCLOSE, worst=worst),
    ]


def quantizer_output_criteria(
    values: np.ndarray, scales: np.ndarray, x: np.ndarray, block: tuple[int, int],
    recipe: str, fmt: str, m: dict[str, Any], division_ulps: int = 0,
) -> list[Criterion]:
    """`quantizer_bit_exact`: (values, scales) bit for bit equal to quantize(x, block,
    recipe, fmt, nan="propagate"), a NaN equal to any NaN (IEEE leaves a NaN's sign and
    payload to the implementation: a kernel's max, multiply and cast may return another
    NaN than numpy's, and no consumer can tell them apart), infinities by sign.  With
    `division_ulps` N > 0 (the kernel divides approximately, within N float32 ulps) the
    criterion is `quantizer_approx_division` instead: each scale one the recipe gives from
    a division within N ulps, each value the recipe's from the kernel's own scale
    (`fp8check.references.quant_approx`).  Records value/scale mismatch counts in `m`;
    the criterion's `worst` is the first mismatching value (index into x) or, with every
    value right, scale (index into the block grid, with "what": "scale"), its ulp
    distance to the recipe's own bits."""
    from fp8check.references import quant_approx, quantize

    ref = quantize(x, (block[0], block[1]), recipe, fmt, nan="propagate")
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
            worst = _element(np.argwhere(scale_bad)[0], s32, ref.scales,
                             metrics.ulp_distance(s32, ref.scales, np.float32))
            worst["what"] = "scale"
    if not ok and value_bad is not None:
        m["value_mismatches"] = n_values = int(np.count_nonzero(value_bad))
        n_bad += n_values
        if n_values:
            worst = _element(np.argwhere(value_bad)[0], values.astype(np.float32),
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


class BadOutput(ValueError):
    """The kernel returned the wrong type, shape or dtype."""


def bias_limits(profile: Profile) -> tuple[tuple[str, metrics.BiasMode, float], ...]:
    """(criterion, `metrics.bias_z` mode, limit) of the two bias criteria."""
    return (("bias_z", "magnitude", profile.max_abs_bias_z),
            ("bias_z_signed", "signed", profile.max_abs_bias_z_signed))


def output_criteria(
    out: np.ndarray, prob: Problem, profile: Profile, m: dict[str, Any], *,
    accum: str | None = None, acc_unit_roundoff: float = 2.0**-24, hopper_interval: int = 128,
    plots: PlotHook | None = None, flushes_subnormals: bool = False,
) -> list[Criterion]:
    """Every layer-1 criterion that one output of a matmul contract decides: correctness
    (finite, bound_ratio, error_ratio, bias_z, and bit_exact when `accum` is declared and
    the problem's partials are exact) then impact.  The one implementation behind both
    the gate (`validate_case`) and `fp8check.testing`; metrics go into `m`, with the
    report's plot data (`m["plots"]`, made by `plots`) when `plots` is given and the
    problem has its unquantized operands.

    `out` must be a numpy array of the problem's output shape and dtype (BadOutput
    otherwise); `accum` is the accumulation recipe the kernel claims, `acc_unit_roundoff`
    its accumulator's unit roundoff (the error bound's u).  A tensor-core accum
    ("deepgemm-hopper" with promotion every `hopper_interval` K elements,
    "deepgemm-blackwell" promoting every 128-wide block) declares that tensor core: the
    bound gains its truncation term and the criteria compare with the model
    (`_correctness`).  The bound's underflow term is the problem's (`fp8check.underflow`),
    the flush-to-zero one when the kernel declares `flushes_subnormals`: then outputs
    below 2^-126 are only held to that term, and `m` says so (`subnormal_range`).
    """
    why = shape_error(out, prob.exact.shape, prob.out_dtype)
    if why is not None:
        raise BadOutput(why)
    sl = slice(0, prob.rows)
    o, exact, out_np = out[sl], prob.exact[sl], NUMPY_DTYPES[prob.out_dtype]
    finite = _finite_criterion(o, exact, out_np, m)
    kept = None
    if not np.isfinite(exact).all():
        kept = np.isfinite(exact)
        n_out = int(kept.size - np.count_nonzero(kept))
        m["nonfinite_exact_elements"] = n_out
        m["nonfinite_note"] = (f"{n_out} of {kept.size} elements have a NaN or Inf exact value "
                               "(non-finite inputs): `finite` decides them; the other "
                               "correctness criteria are computed on the "
                               f"{kept.size - n_out} elements whose exact value is finite")
        o, exact = _neutralised(o, kept), _neutralised(exact, kept)
    # correctly rounded: f64 -> f32 / bf16 is one RNE
    exact_rounded = rounded(exact, out_np)
    ulps = metrics.ulp_distance(o, exact_rounded, out_np)
    extra = model_ref = None
    if accum in TENSOR_CORE_ACCUMS:
        extra = _neutralised(prob.tensor_core_term(accum, hopper_interval)[sl], kept)
        model_ref = _neutralised(prob.accum_ref(accum, prob.out_dtype, hopper_interval)[sl],
                                 kept)
        m["hopper_interval"] = hopper_interval
    underflow = prob.underflow.term(ftz=flushes_subnormals, u=acc_unit_roundoff)
    m["underflow_term"] = underflow
    # A flushing kernel on data that reaches the subnormal range differs from IEEE results
    # there by design: only the bound (with the flush term) is gated for it.
    ftz_relaxed = flushes_subnormals and not prob.underflow.subnormal_free
    if ftz_relaxed:
        m["subnormal_range"] = ("not checked precisely: the kernel flushes subnormals "
                                "(flushes_subnormals); only bound_ratio, with the flush "
                                "term, is gated here")
    elif flushes_subnormals:
        m["subnormal_range"] = "none reached (the kernel flushes subnormals)"
    ratio = metrics.bound_ratio(o, exact, _neutralised(prob.abs_ab[sl], kept), prob.k,
                                u=acc_unit_roundoff, out_dtype=out_np, n=prob.n_terms,
                                extra=extra, underflow=underflow)
    if plots is not None and prob.unquantized is not None:  # the report's per-case figures
        if kept is None:
            m["plots"] = plots(o, prob, acc_unit_roundoff, ulps, ratio, extra)
        else:
            m["plots_note"] = "no per-case figures on a case with non-finite exact values"
    crit = _correctness(prob, o, exact, exact_rounded, _neutralised(prob.naive[sl], kept),
                        ulps, ratio, profile, m, accum, model_ref, kept)
    impact = _impact(prob, out, profile, m)
    if ftz_relaxed:
        m["ftz_not_gated"] = [c.name for c in crit + impact if c.name != "bound_ratio"]
        return [finite] + [c for c in crit if c.name == "bound_ratio"]
    return [finite] + crit + impact


def _neutralised(a: np.ndarray, kept: np.ndarray | None) -> np.ndarray:
    """`a` with zero at the elements not `kept` (a itself when kept is None).

    Zero in the output, the exact value, |A||B|, the baselines and the bound's extra term
    alike makes an excluded element count for nothing: bound ratio 0 (the bound is > 0),
    0 ulps, no error in either rms of error_ratio (whose ratio of means over the same
    count is then the one over the kept elements), no bit difference."""
    if kept is None:
        return a
    return np.where(kept, a, np.zeros((), a.dtype))
