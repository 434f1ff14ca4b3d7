"""The layer-1 criteria of one output on a streamed (production-shape) case, from the
streamed summary `fp8check.totals.gmm_metric_totals`: no [M, N] float64 array is built.

Evaluated, with the same values as `criteria.output_criteria` gives on the same output
(the totals share the elementwise scalar cores of `fp8check.metrics`):

* `finite`: NaN/Inf in the compared rows (the exact reference of finite operands is
  finite, so this is the in-memory path's one-sided count);
* `bound_ratio`: its max, first argmax and count over the bound, bit for bit;
* `bit_exact` where it applies: a declared accumulation recipe on an `exact_partials`
  case, or a tensor-core model (deepgemm-hopper, deepgemm-blackwell), counted against the
  recipe reference streamed chunk by chunk;
* `bias_z` and `bias_z_signed`: the sign test of the error against RN(exact) (against
  the model for a tensor-core recipe) with rows and (group, 128-column tile) as crossed
  clusters, reduced chunk by chunk (`totals.MetricTotals.bias`);
* reported, not gated: ULP max and count vs RN(exact), SQNR (dB) vs exact.

Not evaluated (each needs whole [M, N] float64 arrays or the unquantized operands' float64
product): `error_ratio` (the naive float32 implementation) and the impact criteria.  The
result says so in `metrics["streamed_not_evaluated"]`.  A tensor-core kernel's bound
needs the tensor core's truncation term, which is not streamed: on it `bound_ratio` is
not evaluated and `bit_exact` against the model (a stronger check) decides.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fp8check import metrics
from fp8check.contracts import NUMPY_DTYPES
from fp8check.layers.op.criteria import BadOutput, bias_limits, criterion, shape_error
from fp8check.layers.op.problem import StreamedProblem
from fp8check.profiles import Profile
from fp8check.references.gmm import TENSOR_CORE_ACCUMS
from fp8check.results.model import Criterion
from fp8check.totals import MetricTotals, gmm_metric_totals

NOT_EVALUATED = ("error_ratio", "impact_sqnr_db", "impact_calc_diff", "impact_allclose")


def _exact_element(prob: StreamedProblem, row: int, col: int) -> float:
    """The exact value of out[row, col] (one row's reference: O(K N))."""
    from fp8check.references import gmm

    lq, rq = prob.quantized
    gs = np.asarray(prob.args[-1])
    g = int(np.searchsorted(np.cumsum(gs), row, side="right"))
    a, b = lq.leading(row, row + 1), rq.leading(g, g + 1)
    return float(gmm(a, b, np.array([1]), out_dtype=np.float64, accum="exact")[0, col])


def _worst_element(prob: StreamedProblem, o: np.ndarray, t: MetricTotals) -> dict[str, Any] | None:
    """Criterion.worst of the bound: the first element of largest bound ratio."""
    if t.bound_ratio_argmax < 0:
        return None
    i, j = divmod(t.bound_ratio_argmax, o.shape[1])
    out_np = NUMPY_DTYPES[prob.out_dtype]
    ex = _exact_element(prob, i, j)
    ulp = metrics.ulp_distance(o[i:i + 1, j], np.array([ex]).astype(out_np), out_np)[0]
    err, worst = abs(float(o[i, j]) - ex), t.bound_ratio_max
    return {"index": [i, j], "out": float(o[i, j]), "ref": ex, "ulp": int(ulp),
            "bound": err / worst if np.isfinite(worst) and worst > 0 else None}


def _bias_criteria(t: MetricTotals, profile: Profile, m: dict[str, Any]) -> list[Criterion]:
    """`bias_z` and `bias_z_signed` from the totals' per-cluster sign sums, the values
    `criteria.output_criteria` gives (inf where the output has NaN or Inf, as
    `metrics.bias_z`)."""
    assert t.bias is not None  # gmm_metric_totals
    crit = []
    for name, mode, limit in bias_limits(profile):
        if t.n_nonfinite:
            z = math.inf
        else:
            try:
                z = metrics.bias_z_crossed(t.bias[mode])
            except ValueError:  # a t-statistic needs two rows and two tiles
                m["bias_z_note"] = ("fewer than 2 rows or (group, column tile) clusters: "
                                    "bias not testable")
                return []
        m[name] = z
        crit.append(criterion(name, z, "|x|<=", limit, n_bad=t.n_ulp_off,
                              bad_means="elements not correctly rounded"))
    return crit


def streamed_output_criteria(
    out: np.ndarray, prob: StreamedProblem, profile: Profile, m: dict[str, Any], *,
    accum: str | None = None, acc_unit_roundoff: float = 2.0**-24, hopper_interval: int = 128,
    rows_per_chunk: int = 2048, flushes_subnormals: bool = False,
) -> list[Criterion]:
    """The correctness criteria of `out` [M, N] (the problem's dtype) on a streamed
    problem, in the order `output_criteria` lists them; metrics go into `m`.  `accum`,
    `acc_unit_roundoff`, `hopper_interval` as in `output_criteria`; `rows_per_chunk`
    bounds the streamed chunks (memory O(rows_per_chunk K + rows_per_chunk N));
    `flushes_subnormals` selects the bound's flush-to-zero term (`fp8check.underflow`)."""
    why = shape_error(out, prob.out_shape, prob.out_dtype)
    if why is not None:
        raise BadOutput(why)
    bit_exact = accum is not None and (prob.exact_partials or accum in TENSOR_CORE_ACCUMS)
    lq, rq = prob.quantized
    t = gmm_metric_totals(out, lq, rq, prob.args[-1], accum=accum if bit_exact else None,
                          rows_per_chunk=rows_per_chunk, u=acc_unit_roundoff,
                          interval=hopper_interval, ftz=flushes_subnormals)
    o = out[:prob.rows]
    not_evaluated = list(NOT_EVALUATED)
    m["nonfinite_mismatches"] = t.n_nonfinite
    crit = [criterion("finite", t.n_nonfinite, "==", 0, n_bad=t.n_nonfinite,
                      bad_means="elements non-finite on one side only")]
    if accum in TENSOR_CORE_ACCUMS:
        m["hopper_interval"] = hopper_interval
        not_evaluated.insert(0, "bound_ratio")
    else:
        m["bound_ratio_max"] = t.bound_ratio_max
        if t.bound_ratio_argmax >= 0:
            m["bound_ratio_argmax"] = list(divmod(t.bound_ratio_argmax, out.shape[1]))
        # the totals count ratios over 1, the limit of every profile
        n_over = t.n_over_bound if profile.max_bound_ratio == 1.0 else None
        crit.append(criterion("bound_ratio", t.bound_ratio_max, "<=", profile.max_bound_ratio,
                              n_bad=n_over, bad_means="elements over the bound",
                              worst=_worst_element(prob, o, t)))
    crit += _bias_criteria(t, profile, m)
    m["ulp_max_vs_exact"] = t.ulp_max
    m["ulp_off_vs_exact"] = t.n_ulp_off
    m["sqnr_db_vs_exact"] = t.sqnr_db
    if bit_exact:
        mism = int(t.n_ref_mismatch or 0)
        m["bit_exact_mismatches"] = mism
        m["bit_exact_accum"] = accum
        crit.append(criterion("bit_exact", mism, "==", 0, n_bad=mism,
                              bad_means="elements whose bits differ"))
    m["streamed_not_evaluated"] = not_evaluated
    return crit
