"""The layer-1 criteria engine: every criterion of one matmul output, from its row chunks
(`layers.op.chunks`) reduced by `layers.op.tally.OutputTally`.

The in-memory path (`criteria.output_criteria`, one chunk covering every compared row) and
the production-shape path (`streamed.streamed_output_criteria`, many chunks whose
references are computed one at a time) are this one code; only the chunk source differs.
A criterion that needs a reference the source does not give is not evaluated: `evaluate`
returns its name (the streamed path records them), and the metrics say why, never a value
computed another way.  The declared accumulator (`accumulator.AccumulatorModel`) is a
parameter: it chooses the bound's extra term, what error_ratio and the bias tests compare
with, and whether bit_exact applies.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from fp8check.contracts import NUMPY_DTYPES, MatmulClaims
from fp8check.layers.op.accumulator import AccumulatorModel
from fp8check.layers.op.chunks import NAIVE, TRUNCATION, UNQUANTIZED, ChunkSource
from fp8check.layers.op.problem import Problem
from fp8check.layers.op.tally import ChunkArrays, OutputTally, Setting, ulp_histogram
from fp8check.layers.op.verdict import BadOutput, bias_limits, criterion, shape_error
from fp8check.measures import metrics
from fp8check.profiles import Profile, sqnr_band
from fp8check.results.model import Criterion

# Plot data of one output, made by the report stage (`fp8check.reports.plotdata.plot_data`):
# (compared rows of the output, problem, accumulator unit roundoff, ULP distances to
# RN(exact), bound ratios, the bound's declared-accumulator term or None) -> JSON-ready
# dict.  Layers never import the reports.
PlotHook = Callable[[np.ndarray, Problem, float, np.ndarray, np.ndarray, np.ndarray | None],
                    dict[str, Any]]

IMPACT = ("impact_sqnr_db", "impact_calc_diff", "impact_allclose")
# What a kernel that flushes subnormals is held to on data reaching the subnormal range:
# it differs from IEEE results there by design, so only the bound, with the flush term.
GATED_WHEN_FLUSHING = ("finite", "bound_ratio")
_NOT_ROUNDED = "elements not correctly rounded"
_OUTSIDE_ALLCLOSE = "elements outside allclose(atol, rtol)"


def not_evaluated(source: ChunkSource, acc: AccumulatorModel) -> list[str]:
    """The criteria that `source` lacks a reference for (`ChunkSource.missing`), for a
    kernel declaring `acc`: a tensor core's bound needs its truncation term, error_ratio
    against a float32 accumulator the naive kernel's output, impact the unquantized
    product."""
    names = []
    if acc.against_model and TRUNCATION in source.missing:
        names.append("bound_ratio")
    if not acc.against_model and NAIVE in source.missing:
        names.append("error_ratio")
    if UNQUANTIZED in source.missing:
        names += IMPACT
    return names


def evaluate(
    out: np.ndarray, source: ChunkSource, profile: Profile, m: dict[str, Any],
    claims: MatmulClaims, *,
    plots: PlotHook | None = None,
) -> tuple[list[Criterion], list[str]]:
    """(the criteria of `out` in the order finite, bound_ratio, error_ratio, bias_z,
    bias_z_signed, bit_exact, impact; the names of those not evaluated, `not_evaluated`).

    `out`: the whole output (BadOutput unless it has the source's shape and dtype).
    `claims`: the kernel's, resolved (`MatmulClaims.resolved`), as they were declared: its
    accumulator (`AccumulatorModel.of`) and, when it flushes subnormals, the bound's
    underflow term is the flush-to-zero one, and on data that reaches the subnormal range only
    `GATED_WHEN_FLUSHING` are gated (the others reported in `m["ftz_not_gated"]`).
    `plots`: makes `m["plots"]` from the elementwise measures where the source is one
    in-memory chunk with the unquantized product.  Metrics go into `m`.
    """
    why = shape_error(out, source.out_shape, source.out_dtype)
    if why is not None:
        raise BadOutput(why)
    acc, flushes_subnormals = AccumulatorModel.of(claims), claims.flushes
    skipped = not_evaluated(source, acc)
    underflow = source.underflow.term(ftz=flushes_subnormals, u=acc.unit_roundoff)
    tally = OutputTally(Setting(
        out_dtype=NUMPY_DTYPES[source.out_dtype], k=source.k, n_terms=source.n_terms,
        unit_roundoff=acc.unit_roundoff, underflow=underflow,
        bound="bound_ratio" not in skipped, max_bound_ratio=profile.max_bound_ratio,
        n_groups=source.n_groups, n_cols=source.out_shape[-1], block=source.block,
        against_model=acc.against_model, impact_atol=profile.impact_atol,
        impact_rtol=profile.impact_rtol))
    arrays: list[ChunkArrays] = []
    for chunk in source.chunks(out, acc):
        measured = tally.add(chunk)
        if plots is not None and len(arrays) < 2:  # only one chunk's are the whole output's
            arrays.append(measured)
    finite = _finite(tally, m)
    m.update(acc.declared())
    m["underflow_term"] = underflow
    flush_relaxed = flushes_subnormals and not source.underflow.subnormal_free
    if flush_relaxed:
        m["subnormal_range"] = ("not checked precisely: the kernel flushes subnormals "
                                "(flushes_subnormals); only bound_ratio, with the flush "
                                "term, is gated here")
    elif flushes_subnormals:
        m["subnormal_range"] = "none reached (the kernel flushes subnormals)"
    if plots is not None:
        _plots(plots, source, acc, tally, arrays, m)
    crit = _correctness(tally, profile, m, acc, skipped, acc.bit_exact(source.exact_partials))
    impact = _impact(tally, source, profile, m)
    if flush_relaxed:
        m["ftz_not_gated"] = [c.name for c in crit + impact
                              if c.name not in GATED_WHEN_FLUSHING]
        return [finite, *(c for c in crit if c.name in GATED_WHEN_FLUSHING)], skipped
    return [finite, *crit, *impact], skipped


def _finite(t: OutputTally, m: dict[str, Any]) -> Criterion:
    """`finite`: the compared elements non-finite exactly where the exact value is, with the
    same infinities (NaN payloads and signs are not compared: IEEE leaves them
    unspecified); with the note on the elements whose exact value is not finite."""
    m["nonfinite_mismatches"] = t.finite_bad
    if t.nonfinite_exact:
        n_out = t.nonfinite_exact
        m["nonfinite_exact_elements"] = n_out
        m["nonfinite_note"] = (f"{n_out} of {t.n} elements have a NaN or Inf exact value "
                               "(non-finite inputs): `finite` decides them; the other "
                               "correctness criteria are computed on the "
                               f"{t.n - n_out} elements whose exact value is finite")
    return criterion("finite", t.finite_bad, "==", 0, n_bad=t.finite_bad,
                     bad_means="elements finite, NaN or +-Inf unlike the exact value",
                     worst=t.finite_first)


def _plots(plots: PlotHook, source: ChunkSource, acc: AccumulatorModel, t: OutputTally,
           arrays: list[ChunkArrays], m: dict[str, Any]) -> None:
    """The report's per-case figures, from the elementwise measures of the whole output."""
    prob = source.problem
    if prob is None or prob.unquantized is None:
        return
    if t.nonfinite_exact:
        m["plots_note"] = "no per-case figures on a case with non-finite exact values"
    elif len(arrays) != 1 or arrays[0].ratio is None:
        m["plots_note"] = "no per-case figures: they need the whole output in one chunk"
    else:
        a = arrays[0]
        assert a.ratio is not None
        m["plots"] = plots(a.out, prob, acc.unit_roundoff, a.ulps, a.ratio, a.extra)


def _correctness(t: OutputTally, profile: Profile, m: dict[str, Any], acc: AccumulatorModel,
                 skipped: list[str], bit_exact: bool) -> list[Criterion]:
    """bound_ratio, error_ratio, the bias tests and bit_exact (where `bit_exact`), and the
    reported ULP, allclose and SQNR figures vs the exact value.

    Against a tensor-core model (`acc.against_model`) error_ratio compares the kernel's
    error with the model's own (the naive computation on that hardware), and the bias
    tests measure the kernel's error against the model, not against the exact value.
    Why that is the right expectation: a kernel that computes the declared accumulator
    has error (out - exact) = (model - exact) + (out - model), the first term the
    declared truncation (one-signed by construction) and the second zero (bit-exact) or
    the zero-mean float32 rounding of a different promotion order; any further
    truncation (a narrower accumulator, a truncating cast) is a one-signed part of
    (out - model) and shows in the statistic as it would against exact."""
    worst_off = t.ulp.element
    crit: list[Criterion] = []
    if "bound_ratio" not in skipped:
        worst = float(t.ratio.value)
        m["bound_ratio_max"] = worst
        if t.ratio.element is not None:
            m["bound_ratio_argmax"] = t.ratio.element["index"]
        crit.append(criterion("bound_ratio", worst, "<=", profile.max_bound_ratio,
                              n_bad=t.n_over, bad_means="elements over the bound",
                              worst=t.ratio.element))
    if "error_ratio" not in skipped:
        er = _error_ratio(t)
        m["error_ratio"] = er
        crit.append(criterion("error_ratio", er, "<=", profile.max_error_ratio,
                              n_bad=t.n_off, bad_means=_NOT_ROUNDED, worst=worst_off))
    crit += _bias(t, profile, m)
    m["ulp_max_vs_exact"] = int(t.ulp.value)
    m["ulp_histogram_vs_exact"] = ulp_histogram(t.ulp_counts)
    m["ulp_off_vs_exact"] = t.n_off
    m["ref_allclose_fail_frac"] = t.ref_close_fail / t.n if t.n else 0.0
    m["sqnr_db_vs_exact"] = (metrics.sqnr_db_of_sums(t.err.total("exact"), t.err.total("out"))
                             if t.out_finite else -math.inf)
    if bit_exact:
        mism = t.bit_mismatches
        m["bit_exact_mismatches"] = mism
        m["bit_exact_accum"] = acc.recipe
        crit.append(criterion("bit_exact", mism, "==", 0, n_bad=mism,
                              bad_means="elements whose bits differ",
                              worst=t.bit.element if mism else None))
    return crit


def _error_ratio(t: OutputTally) -> float:
    """rms(out - exact) / rms(baseline - exact) over the compared elements
    (`metrics.error_ratio`): inf with NaN or Inf in out; ValueError for a non-finite
    baseline, which would let anything pass."""
    if not t.base_finite:
        raise ValueError("error_ratio: naive contains NaN or Inf; the baseline must be finite")
    if not t.out_finite:
        return math.inf
    return metrics.error_ratio_of_sums(t.err.total("out"), t.err.total("base"), t.n)


def _bias(t: OutputTally, profile: Profile, m: dict[str, Any]) -> list[Criterion]:
    """`bias_z` and `bias_z_signed`: the sign test of the error against RN(exact) (or the
    model), rows and (group, column tile) as crossed clusters (`metrics.bias_z_crossed`).

    Against the correctly rounded exact value: a correct RNE output has zero-mean error
    against it whatever the data, while against the unrounded exact value RNE itself shows
    a data-determined bias when the data has few distinct values (near-max blocks, M_g = 1
    outer products).  Both signs: "magnitude" (toward or away from zero: truncation) and
    "signed" (toward -inf or +inf: a directed rounding mode, whose errors cancel in the
    magnitude statistic on mixed-sign data).  inf where the output has NaN or Inf
    (`finite` fails it too)."""
    crit = []
    for name, mode, limit in bias_limits(profile):
        z = math.inf if not t.out_finite else _bias_z(t, mode)
        if z is None:
            m["bias_z_note"] = ("fewer than 2 rows or (group, column tile) clusters: bias "
                                "not testable")
            break
        m[name] = z
        crit.append(criterion(name, z, "|x|<=", limit, n_bad=t.n_off,
                              bad_means=_NOT_ROUNDED, worst=t.ulp.element))
    return crit


def _bias_z(t: OutputTally, mode: str) -> float | None:
    """The bias statistic of `mode`, None where it is not testable (a t-statistic needs
    two rows and two clusters; a non-finite expected value gives no sums)."""
    sums = t.bias(mode)
    if sums is None:
        return None
    try:
        return metrics.bias_z_crossed(sums)
    except ValueError:
        return None


def _impact(t: OutputTally, source: ChunkSource, profile: Profile,
            m: dict[str, Any]) -> list[Criterion]:
    """The quantization-impact criteria against the unquantized float64 product: SQNR,
    calc_diff and allclose on row-normalised values (atol is then in units of the row's
    RMS: an absolute tolerance presumes unit-scale rows), with the global SQNR reported."""
    if UNQUANTIZED in source.missing:
        m["impact_note"] = source.missing[UNQUANTIZED]
        return []
    if t.impact_nonfinite_ref:
        m["impact_note"] = (f"unquantized reference non-finite at {t.impact_nonfinite_ref} "
                            "elements (NaN or Inf inputs): quantization impact is not "
                            "defined there, not measured; propagation is decided by "
                            "`finite`")
        return []
    if not t.impact_nonzero:
        m["impact_note"] = "unquantized reference is all zero: nothing to measure"
        return []
    g, nrm = t.impact_global, t.impact_norm
    m["impact_sqnr_db_global"] = (metrics.sqnr_db_of_sums(g.total("signal"), g.total("noise"))
                                  if g.finite else -math.inf)
    sqnr = (metrics.sqnr_db_of_sums(nrm.total("signal"), nrm.total("noise"))
            if nrm.finite else -math.inf)
    cd = (metrics.calc_diff_of_sums(nrm.total("cross"), nrm.total("squares"))
          if nrm.finite else math.inf)
    frac = t.impact_close_fail / t.impact_close_n if t.impact_close_n else 0.0
    m.update(impact_sqnr_db=sqnr, impact_band=sqnr_band(sqnr), impact_calc_diff=cd,
             impact_allclose_fail_frac=frac)
    if source.impact_not_gated is not None:
        m["impact_not_gated"] = source.impact_not_gated
        return []
    n_bad, worst = t.impact_close_fail, t.impact_worst.element
    return [
        criterion("impact_sqnr_db", sqnr, ">=", profile.min_sqnr_db, n_bad=n_bad,
                  bad_means=_OUTSIDE_ALLCLOSE, worst=worst),
        criterion("impact_calc_diff", cd, "<=", profile.max_calc_diff, n_bad=n_bad,
                  bad_means=_OUTSIDE_ALLCLOSE, worst=worst),
        criterion("impact_allclose", frac, "<=", profile.impact_max_fail_frac, n_bad=n_bad,
                  bad_means=_OUTSIDE_ALLCLOSE, worst=worst),
    ]
