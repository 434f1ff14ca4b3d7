"""Layer 1 (single op): one kernel on one case, every criterion a named, reported metric.

Two questions, never mixed (see `fp8check.profiles`):

* correctness, against the bit-exact reference on the *same* quantized operands:
  - `finite`: no NaN/Inf unless the exact reference has them at the same place;
  - `bound_ratio` <= 1 (rigorous: any valid float32 summation order passes);
  - `error_ratio` <= 2 against a naive same-precision implementation (dequantized
    operands, a float32 sum in K order per group, `naive_matmul`, rounded to the output
    dtype);
  - `bias_z` within the profile's limit (truncation instead of rounding is one-signed);
  - `deterministic`: two calls give the same bits (kernels that declare it);
  - `bit_exact` against `gmm(..., accum=<declared>)` on `exact_partials` cases;
  - `quantizer_bit_exact`: values and scales bit for bit equal to the recipe.
* quantization impact, FP8 (or bf16) result vs the unquantized float64 reference:
  SQNR (dB), calc_diff and allclose(atol, rtol) against the profile's thresholds.

Only rows below sum(group_sizes) of a [M,N] output are compared (DESIGN.md).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np

from fp8check import metrics
from fp8check.cases import Case, CaseInputs, case_inputs
from fp8check.contracts import NUMPY_DTYPES, KernelSpec, call_kernel
from fp8check.profiles import IMPACT_REPORT_ONLY, Profile, sqnr_band
from fp8check.reports.plotdata import plot_summary

LAYER = "op"
# The source document's strict per-element check of an FP8 kernel vs its FP8 CPU reference
# (only accumulation order may differ).  Reported, not gated: near cancellation a valid
# order can exceed it, which is why the gate uses the rigorous bound instead.
REF_ATOL, REF_RTOL = 1e-3, 1e-2
ULP_BINS = (0, 1, 2, 4, 8, 64)


@dataclass
class Criterion:
    """One gated check: `value` compared with `limit` (`passed` says which way it went)."""

    name: str
    question: str  # "correctness" or "impact"
    value: float | bool | None
    limit: float | bool | None
    passed: bool
    # Elements behind the verdict: how many are off (the criterion's own per-element
    # test, or for aggregate statistics the elements that differ from the correctly
    # rounded exact value), and the worst one: {"index", "out", "ref", "ulp", "bound"}.
    n_bad: int | None = None
    worst: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {"question": self.question, "value": jsonable(self.value),
             "limit": jsonable(self.limit), "passed": self.passed}
        if self.n_bad is not None:
            d["n_bad"] = self.n_bad
        if self.worst is not None:
            d["worst"] = jsonable(self.worst)
        return d


@dataclass
class CaseResult:
    """Outcome of one (kernel, layer, case).  passed is None for a skipped case."""

    kernel: str
    layer: str
    case: str
    passed: bool | None
    metrics: dict[str, Any] = field(default_factory=dict)
    criteria: list[Criterion] = field(default_factory=list)
    skipped: str | None = None
    error: str | None = None
    repro: str | None = None
    seconds: float = 0.0
    # Where `seconds` went (layer 1): "reference" (building the case's references, on the
    # result that built them: kernels of one contract share them), "kernel" (the calls of
    # the kernel under test, its first-call compilation included) and "metrics" (the rest).
    timing: dict[str, float] = field(default_factory=dict)

    @property
    def failed_criteria(self) -> list[str]:
        return [c.name for c in self.criteria if not c.passed]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel, "layer": self.layer, "case": self.case,
            "passed": self.passed, "metrics": {k: jsonable(v) for k, v in self.metrics.items()},
            "criteria": {c.name: c.to_dict() for c in self.criteria},
            "failed": self.failed_criteria, "skipped": self.skipped, "error": self.error,
            "repro": self.repro, "seconds": round(self.seconds, 4),
            **({"timing": {k: round(v, 4) for k, v in self.timing.items()}}
               if self.timing else {}),
        }


def jsonable(v: Any) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not np.isfinite(v):
        return str(v)  # JSON has no inf / nan
    if isinstance(v, dict):
        return {k: jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [jsonable(x) for x in v]
    return v


# --- plain grouped matmuls: the naive same-precision baseline of error_ratio (float32) and
# the unquantized reference of the impact question (float64: its ~1e-16 relative error is
# negligible next to quantization noise of ~1e-2) -------------------------------------------


@numba.njit(parallel=True, cache=True)
def _naive_matmul(a, b):
    m, k = a.shape
    out = np.zeros((m, b.shape[1]), np.float32)
    for i in numba.prange(m):
        acc = out[i]
        for t in range(k):  # K order; the columns are independent, so this vectorizes
            x = a[i, t]
            for j in range(acc.shape[0]):
                acc[j] = acc[j] + x * b[t, j]  # RN(x * b), then RN of the sum: no fma
    return out


def naive_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The naive float32 a @ b of error_ratio: a [m, k], b [k, n] taken as float32, each
    product rounded to float32 and added to a float32 accumulator in K order (no fma).
    The same order on every machine: a BLAS sgemm's order, and so its error, depends on
    the CPU's kernel (with OpenBLAS on a Zen 4 CPU a correct Pallas kernel reached
    error_ratio 2.1 on lognormal rows against sgemm)."""
    return _naive_matmul(np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32))


def _f64_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) @ b.astype(np.float64)


# The per-group product by output dtype: the naive baseline, or the float64 reference.
_MATMULS = {np.dtype(np.float32): naive_matmul, np.dtype(np.float64): _f64_matmul}


def grouped_matmul(lhs: np.ndarray, rhs: np.ndarray, group_sizes: np.ndarray,
                   dtype: type = np.float32) -> np.ndarray:
    """Per group lhs_g @ rhs[g] in `dtype` (float32: `naive_matmul`; float64: BLAS on the
    exact float64 images); rows past the groups are 0."""
    matmul = _MATMULS[np.dtype(dtype)]
    res = np.zeros((lhs.shape[0], rhs.shape[2]), dtype)
    start = 0
    for g, size in enumerate(group_sizes.tolist()):
        res[start:start + size] = matmul(lhs[start:start + size], rhs[g])
        start += size
    return res


def grouped_tmatmul(lhs: np.ndarray, dy: np.ndarray, group_sizes: np.ndarray,
                    dtype: type = np.float32) -> np.ndarray:
    """Per group lhs_g^T @ dy_g in `dtype` (as `grouped_matmul`): [G,K,N], zeros if empty."""
    matmul = _MATMULS[np.dtype(dtype)]
    res = np.zeros((len(group_sizes), lhs.shape[1], dy.shape[1]), dtype)
    start = 0
    for g, size in enumerate(group_sizes.tolist()):
        res[g] = matmul(lhs[start:start + size].T, dy[start:start + size])
        start += size
    return res


# --- the problem each contract poses --------------------------------------------------------


@dataclass
class Problem:
    """Kernel arguments and everything the criteria compare against (numpy, float64 refs).

    `rows` is how many leading rows are compared (all of them for tgmm); `k` and `n_terms`
    feed the error bound.  `out_dtype` is the dtype the output must have; `exact_partials`
    says every 128-wide partial is exact in float32 (then a declared accumulation recipe
    is checked bit for bit); `unquantized` is None when the unquantized operands are not
    known (the impact question is then not measured); `impact_not_gated` gives the reason
    when impact is reported but not gated.  A Problem depends only on (contract, case), so
    one serves every kernel of that contract; `accum_ref` memoises the reference under
    each declared recipe.
    """

    args: tuple[np.ndarray, ...]
    exact: np.ndarray
    abs_ab: np.ndarray
    naive: np.ndarray
    unquantized: np.ndarray | None
    rows: int
    k: int
    n_terms: int | None
    out_dtype: str
    exact_partials: bool = False
    impact_not_gated: str | None = None
    quantized: tuple[Any, Any] | None = None  # (lhs QTensor, rhs QTensor) for gmm-fp8
    _accum_refs: dict[tuple[str, str, int], np.ndarray] = field(default_factory=dict)
    _hopper_terms: dict[int, np.ndarray] = field(default_factory=dict)

    def accum_ref(self, accum: str, out_dtype: str, interval: int = 128) -> np.ndarray:
        """gmm(..., accum=accum, interval=interval) on the quantized operands, rounded to
        out_dtype (`interval`: deepgemm-hopper's promotion interval)."""
        from fp8check.references import gmm

        key = (accum, out_dtype, interval)
        if key not in self._accum_refs:
            lq, rq = self.quantized
            self._accum_refs[key] = gmm(lq, rq, self.args[-1], out_dtype=NUMPY_DTYPES[out_dtype],
                                        accum=accum, interval=interval)
        return self._accum_refs[key]

    def hopper_term(self, interval: int) -> np.ndarray:
        """The Hopper tensor core's truncation term [M, N] (`references.hopper_bound`)."""
        from fp8check.references.hopper_bound import truncation_term

        if interval not in self._hopper_terms:
            lq, rq = self.quantized
            self._hopper_terms[interval] = truncation_term(lq, rq, self.args[-1],
                                                           interval=interval)
        return self._hopper_terms[interval]


def gmm_fp8_problem(
    lq: Any, rq: Any, group_sizes: np.ndarray, out_dtype: str,
    unquantized: tuple[np.ndarray, np.ndarray] | None = None, **facts: Any,
) -> Problem:
    """The `gmm-fp8` problem on quantized operands lq [M,K] (1x128) and rq [G,K,N]
    (128x128) QTensors; `unquantized` = (x, w) they came from (float32), if known;
    `facts`: exact_partials, impact_not_gated (see Problem)."""
    from fp8check.references import abs_product, dequantize, gmm

    gs = group_sizes
    return Problem(
        args=(lq.values, lq.scales, rq.values, rq.scales, gs),
        exact=gmm(lq, rq, gs, out_dtype=np.float64, accum="exact"),
        abs_ab=abs_product(lq, rq, gs),
        naive=grouped_matmul(dequantize(lq), dequantize(rq), gs).astype(NUMPY_DTYPES[out_dtype]),
        unquantized=None if unquantized is None else grouped_matmul(*unquantized, gs, np.float64),
        rows=int(gs.sum()), k=lq.shape[1], n_terms=None, out_dtype=out_dtype,
        quantized=(lq, rq), **facts,
    )


def plain_gmm_problem(
    lhs: np.ndarray, rhs: np.ndarray, group_sizes: np.ndarray, out_dtype: str,
    unquantized: tuple[np.ndarray, np.ndarray] | None = None, **facts: Any,
) -> Problem:
    """The `gmm` problem on plain (bf16 or f32) operands lhs [M,K], rhs [G,K,N]."""
    from fp8check.references import abs_product, gmm

    gs = group_sizes
    return Problem(
        args=(lhs, rhs, gs),
        exact=gmm(lhs, rhs, gs, out_dtype=np.float64, accum="exact"),
        abs_ab=abs_product(lhs, rhs, gs),
        naive=grouped_matmul(lhs, rhs, gs).astype(NUMPY_DTYPES[out_dtype]),
        unquantized=None if unquantized is None else grouped_matmul(*unquantized, gs, np.float64),
        # No scales in a plain matmul: only the K-term sum rounds.
        rows=int(gs.sum()), k=lhs.shape[1], n_terms=lhs.shape[1], out_dtype=out_dtype, **facts,
    )


def tgmm_problem(
    lhs: np.ndarray, dy: np.ndarray, group_sizes: np.ndarray, out_dtype: str,
    unquantized: tuple[np.ndarray, np.ndarray] | None = None, **facts: Any,
) -> Problem:
    """The `tgmm` problem on plain (bf16 or f32) operands lhs [M,K], dy [M,N]."""
    from fp8check.references import tgmm

    gs = group_sizes
    # The reduction runs over a group's rows: the longest group bounds every entry.
    k = max(int(gs.max(initial=0)), 1)
    return Problem(
        args=(lhs, dy, gs),
        exact=tgmm(lhs, dy, gs, out_dtype=np.float64),
        # |lhs_g|^T |dy_g| in float64: low by at most M_g 2^-53 relative, negligible next to
        # the bound's gamma_n >= n 2^-24.
        abs_ab=grouped_tmatmul(np.abs(lhs.astype(np.float64)), np.abs(dy.astype(np.float64)),
                               gs, np.float64),
        naive=grouped_tmatmul(lhs, dy, gs).astype(NUMPY_DTYPES[out_dtype]),
        unquantized=None if unquantized is None else grouped_tmatmul(*unquantized, gs, np.float64),
        rows=len(gs), k=k, n_terms=k, out_dtype=out_dtype, **facts,
    )


# --- criteria -------------------------------------------------------------------------------


def _shape_error(out: Any, expected: tuple[int, ...], out_dtype: str) -> str | None:
    if not isinstance(out, np.ndarray):
        return f"returned {type(out).__name__}, expected an array"
    if out.shape != expected:
        return f"returned shape {out.shape}, expected {expected}"
    if out.dtype != NUMPY_DTYPES[out_dtype]:
        return f"returned dtype {out.dtype}, expected {NUMPY_DTYPES[out_dtype]}"
    return None


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _finite_mismatches(out: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """Mask of the elements where the kernel is non-finite and the reference is not, or
    vice versa, or both are infinite with different signs."""
    if np.isfinite(out).all() and np.isfinite(exact).all():
        return np.zeros(out.shape, bool)
    o, e = out.astype(np.float64), exact
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


def _element(idx: tuple[int, ...] | np.ndarray, out: np.ndarray, ref: np.ndarray,
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


def _correctness(
    prob: Problem, o: np.ndarray, ulps: np.ndarray, ratio: np.ndarray, profile: Profile,
    m: dict[str, Any], accum: str | None, model_ref: np.ndarray | None = None,
) -> list[Criterion]:
    """The correctness criteria of the compared rows `o` of an output, given their ULP
    distances to RN(exact) and bound ratios.

    `model_ref`: the declared hardware accumulator's result (deepgemm-hopper), when the
    kernel declares one.  Its truncation is the hardware's, not a bug: error_ratio then
    compares the kernel's error with the model's own (the naive computation on that
    hardware), and bias_z measures the kernel's error against the model, not against
    the exact value.  Why that is the right expectation: a kernel that computes the
    declared accumulator has error (out - exact) = (model - exact) + (out - model), the
    first term the declared truncation (one-signed by construction) and the second zero
    (bit-exact) or the zero-mean float32 rounding of a different promotion order; any
    further truncation (a narrower accumulator, a truncating cast) is a one-signed part
    of (out - model) and shows in the statistic as it would against exact."""
    sl = slice(0, prob.rows)
    exact = prob.exact[sl]
    out_np = NUMPY_DTYPES[prob.out_dtype]
    exact_rounded = exact.astype(out_np)
    n_off = int(np.count_nonzero(ulps))  # elements not correctly rounded
    worst_off = _worst_ulp(o, exact, ulps)
    crit: list[Criterion] = []

    mask = _finite_mismatches(o, exact)
    bad = int(np.count_nonzero(mask))
    m["nonfinite_mismatches"] = bad
    first_bad = _element(np.argwhere(mask)[0], o, exact, ulps) if bad else None
    crit.append(Criterion("finite", "correctness", bad, 0, bad == 0, n_bad=bad, worst=first_bad))

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
    crit.append(Criterion("bound_ratio", "correctness", worst, profile.max_bound_ratio,
                          bool(worst <= profile.max_bound_ratio),
                          n_bad=int(np.count_nonzero(ratio > profile.max_bound_ratio)),
                          worst=worst_el))

    naive = prob.naive[sl] if model_ref is None else model_ref
    er = float(metrics.error_ratio(o, exact, naive))
    m["error_ratio"] = er
    crit.append(Criterion("error_ratio", "correctness", er, profile.max_error_ratio,
                          bool(er <= profile.max_error_ratio), n_bad=n_off, worst=worst_off))

    clusters, n_clusters = _bias_clusters(o)
    if n_clusters < 2:  # a t-statistic needs two independent samples
        m["bias_z_note"] = "fewer than 2 (row, N tile) clusters: bias not testable"
    else:
        # Against the correctly rounded exact value: a correct RNE output has zero-mean
        # error against it whatever the data, while against the unrounded exact value RNE
        # itself shows a data-determined bias when the data has few distinct values
        # (near-max blocks, M_g = 1 outer products).  Clustered by (row, N tile): those
        # elements share their scales' roundings (see metrics.bias_z).
        z = float(metrics.bias_z(o, exact_rounded if model_ref is None else model_ref,
                                 clusters=clusters))
        m["bias_z"] = z
        crit.append(Criterion("bias_z", "correctness", z, profile.max_abs_bias_z,
                              bool(abs(z) <= profile.max_abs_bias_z), n_bad=n_off,
                              worst=worst_off))

    m["ulp_max_vs_exact"] = int(ulps.max(initial=0))
    m["ulp_histogram_vs_exact"] = _ulp_histogram(ulps)
    ref_close = metrics.allclose_report(o, exact, REF_ATOL, REF_RTOL)
    m["ref_allclose_fail_frac"] = float(ref_close.frac_fail)

    # The hardware model is bit-exact by definition on every case; the float32 recipes
    # only where every partial is exact in float32.
    if accum is not None and (prob.exact_partials or model_ref is not None):
        ref = prob.accum_ref(accum, prob.out_dtype)[sl] if model_ref is None else model_ref
        d = metrics.ulp_distance(o, ref, out_np)
        mism = int(np.count_nonzero(d))
        m["bit_exact_mismatches"] = mism
        m["bit_exact_accum"] = accum
        crit.append(Criterion("bit_exact", "correctness", mism, 0, mism == 0, n_bad=mism,
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
    o, ref = out[sl].astype(np.float64), prob.unquantized[sl]
    if not np.any(ref):
        m["impact_note"] = "unquantized reference is all zero: nothing to measure"
        return []
    m["impact_sqnr_db_global"] = float(metrics.sqnr_db(ref, o))
    # SQNR, calc_diff and allclose on row-normalised values: atol is then in units of the
    # row's RMS (the source document's atol assumes unit-scale rows).
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
        Criterion("impact_sqnr_db", "impact", sqnr, profile.min_sqnr_db,
                  bool(sqnr >= profile.min_sqnr_db), n_bad=close.n_fail, worst=worst),
        Criterion("impact_calc_diff", "impact", cd, profile.max_calc_diff,
                  bool(cd <= profile.max_calc_diff), n_bad=close.n_fail, worst=worst),
        Criterion("impact_allclose", "impact", float(close.frac_fail),
                  profile.impact_max_fail_frac,
                  bool(close.frac_fail <= profile.impact_max_fail_frac), n_bad=close.n_fail,
                  worst=worst),
    ]


def quantizer_output_criteria(
    values: np.ndarray, scales: np.ndarray, x: np.ndarray, block: tuple[int, int],
    recipe: str, fmt: str, m: dict[str, Any],
) -> list[Criterion]:
    """`quantizer_bit_exact`: (values, scales) bit for bit equal to quantize(x, block,
    recipe, fmt).  Records value/scale mismatch counts in `m`; the criterion's `worst` is
    the first mismatching value (index into x) or, with every value right, scale (index
    into the block grid, with "what": "scale")."""
    from fp8check.references import quantize

    ref = quantize(x, tuple(block), recipe, fmt)
    values, scales = np.asarray(values), np.asarray(scales)
    val_ok = _same_bits(values, ref.values)
    scale_ok = _same_bits(np.asarray(scales, dtype=np.float32), ref.scales) and (
        scales.dtype == np.float32)
    n_bad, worst = 0, None
    if not scale_ok and scales.shape == ref.scales.shape:
        s32 = np.asarray(scales, np.float32)
        diff = s32.view(np.uint32) != ref.scales.view(np.uint32)
        m["scale_mismatches"] = n_scales = int(np.count_nonzero(diff))
        n_bad += n_scales
        if n_scales:
            worst = _element(np.argwhere(diff)[0], s32, ref.scales,
                             metrics.ulp_distance(s32, ref.scales, np.float32))
            worst["what"] = "scale"
    if not val_ok and values.shape == ref.values.shape and values.dtype == ref.values.dtype:
        diff = values.view(np.uint8) != ref.values.view(np.uint8)
        m["value_mismatches"] = n_values = int(np.count_nonzero(diff))
        n_bad += n_values
        if n_values:
            worst = _element(np.argwhere(diff)[0], values.astype(np.float32),
                             ref.values.astype(np.float32),
                             metrics.ulp_distance(values, ref.values, ref.values.dtype))
            worst["what"] = "value"
    ok = val_ok and scale_ok
    if not ok and worst is None:  # wrong shape or dtype: say which
        m["quantizer_layout"] = (f"returned values {values.dtype}{list(values.shape)}, "
                                 f"scales {scales.dtype}{list(scales.shape)}; expected "
                                 f"{ref.values.dtype}{list(ref.values.shape)}, "
                                 f"float32{list(ref.scales.shape)}")
    return [Criterion("quantizer_bit_exact", "correctness", ok, True, ok,
                      n_bad=None if ok else n_bad, worst=worst)]


def _quantizer_criteria(spec: KernelSpec, inp: CaseInputs, m: dict[str, Any]) -> list[Criterion]:
    x = inp.w if tuple(spec.block) == (128, 128) else inp.x
    x = x.astype(NUMPY_DTYPES[spec.in_dtype])
    runs = [call_kernel(spec, (x,)) for _ in range(2 if spec.deterministic else 1)]
    values, scales = runs[0]
    crit = quantizer_output_criteria(values, scales, x, tuple(spec.block), spec.recipe,
                                     spec.fmt, m)
    if spec.deterministic:
        same = all(_same_bits(np.asarray(a), np.asarray(b)) for a, b in zip(*runs, strict=True))
        crit.append(Criterion("deterministic", "correctness", same, True, same))
    return crit


def build_problem(contract: str, case: Case) -> Problem:
    """Kernel arguments and references of `case` under a matmul contract."""
    from fp8check.references import quantize

    inp = case_inputs(case)
    gs = inp.group_sizes
    facts = {"exact_partials": case.exact_partials,
             "impact_not_gated": IMPACT_REPORT_ONLY.get(case.distribution)}
    bf16 = NUMPY_DTYPES["bf16"]
    if contract == "gmm-fp8":
        return gmm_fp8_problem(quantize(inp.x, (1, 128), case.recipe),
                               quantize(inp.w, (128, 128), case.recipe), gs, case.out_dtype,
                               (inp.x, inp.w), **facts)
    if contract == "gmm":
        return plain_gmm_problem(inp.x.astype(bf16), inp.w.astype(bf16), gs, case.out_dtype,
                                 (inp.x, inp.w), **facts)
    if contract == "tgmm":
        return tgmm_problem(inp.x.astype(bf16), inp.dy.astype(bf16), gs, case.out_dtype,
                            (inp.x, inp.dy), **facts)
    raise ValueError(f"contract {contract!r} has no matmul problem")


def validate_case(
    spec: KernelSpec, case: Case, profile: Profile, problem: Problem | None = None
) -> CaseResult:
    """Run `spec` on `case` (twice when it declares determinism) and apply every criterion.

    `problem` (from `build_problem(spec.contract, case)`) may be shared between kernels.
    A kernel exception or a wrong output shape/dtype is a failed result, never a crash; a
    failure of the references themselves is reported as such.
    """
    t0 = time.perf_counter()
    res = CaseResult(kernel=spec.name, layer=LAYER, case=case.id, passed=None)
    m = res.metrics
    m.update(group_sizes=list(case.group_sizes), out_dtype=case.out_dtype, recipe=case.recipe,
             exact_partials=case.exact_partials)
    timing = res.timing
    try:
        if spec.contract == "quantizer":
            res.criteria = _quantizer_criteria(spec, case_inputs(case), m)
        else:
            prob = problem
            if prob is None:
                t = time.perf_counter()
                prob = build_problem(spec.contract, case)
                timing["reference"] = time.perf_counter() - t
            res.criteria = _matmul_criteria(spec, case, prob, profile, m, timing)
    except BadOutput as e:
        res.error = f"bad output: {e}"
    except Exception as e:  # the kernel under test may raise anything: report, don't crash
        res.error = f"{type(e).__name__}: {e}"
    res.passed = res.error is None and all(c.passed for c in res.criteria)
    res.seconds = time.perf_counter() - t0
    if "kernel" in timing:
        timing["metrics"] = max(0.0, res.seconds - sum(timing.values()))
    return res


class BadOutput(ValueError):
    """The kernel returned the wrong type, shape or dtype."""


def _bias_clusters(o: np.ndarray) -> tuple[np.ndarray, int]:
    """Cluster label per element for bias_z, and the number of clusters: (row, 128-wide
    N tile) of a [rows, N] output, (expert, row, N tile) of a [G, K, N] one.  Labels are
    dense, 0 .. count - 1 in C order."""
    tiles = -(-o.shape[-1] // 128)
    lead = math.prod(o.shape[:-1])
    labels = np.arange(lead)[:, None] * tiles + np.arange(o.shape[-1]) // 128
    return labels.reshape(o.shape), lead * tiles  # every pair holds an element


def output_criteria(
    out: np.ndarray, prob: Problem, profile: Profile, m: dict[str, Any], *,
    accum: str | None = None, acc_unit_roundoff: float = 2.0**-24, hopper_interval: int = 128,
) -> list[Criterion]:
    """Every layer-1 criterion that one output of a matmul contract decides: correctness
    (finite, bound_ratio, error_ratio, bias_z, and bit_exact when `accum` is declared and
    the problem's partials are exact) then impact.  The one implementation behind both
    the gate (`validate_case`) and `fp8check.testing`; metrics go into `m`, with the
    report's plot data (`m["plots"]`, `fp8check.reports.plotdata`) when the problem has
    its unquantized operands.

    `out` must be a numpy array of the problem's output shape and dtype (BadOutput
    otherwise); `accum` is the accumulation recipe the kernel claims, `acc_unit_roundoff`
    its accumulator's unit roundoff (the error bound's u).  accum "deepgemm-hopper"
    declares the Hopper tensor core with promotion every `hopper_interval` K elements: the
    bound gains its truncation term and the criteria compare with the model
    (`_correctness`).
    """
    why = _shape_error(out, prob.exact.shape, prob.out_dtype)
    if why is not None:
        raise BadOutput(why)
    sl = slice(0, prob.rows)
    o, exact, out_np = out[sl], prob.exact[sl], NUMPY_DTYPES[prob.out_dtype]
    # correctly rounded: f64 -> f32 / bf16 is one RNE
    ulps = metrics.ulp_distance(o, exact.astype(out_np), out_np)
    hopper = accum == "deepgemm-hopper"
    extra = prob.hopper_term(hopper_interval)[sl] if hopper else None
    model_ref = prob.accum_ref(accum, prob.out_dtype, hopper_interval)[sl] if hopper else None
    if hopper:
        m["hopper_interval"] = hopper_interval
    ratio = metrics.bound_ratio(o, exact, prob.abs_ab[sl], prob.k, u=acc_unit_roundoff,
                                out_dtype=out_np, n=prob.n_terms, extra=extra)
    if prob.unquantized is not None:  # the report's per-case figures (bounded arrays)
        m["plots"] = plot_summary(o, prob, acc_unit_roundoff, ulps, ratio)
    return (_correctness(prob, o, ulps, ratio, profile, m, accum, model_ref)
            + _impact(prob, out, profile, m))


def _matmul_criteria(
    spec: KernelSpec, case: Case, prob: Problem, profile: Profile, m: dict[str, Any],
    timing: dict[str, float],
) -> list[Criterion]:
    outs = []
    t = time.perf_counter()
    for _ in range(2 if spec.deterministic else 1):
        out = call_kernel(spec, prob.args, case.out_dtype)
        why = _shape_error(out, prob.exact.shape, case.out_dtype)
        if why is not None:
            raise BadOutput(why)
        outs.append(out)
    timing["kernel"] = time.perf_counter() - t
    crit = output_criteria(outs[0], prob, profile, m, accum=spec.accum,
                           acc_unit_roundoff=spec.acc_unit_roundoff,
                           hopper_interval=spec.hopper_interval)
    if spec.deterministic:
        sl = slice(0, prob.rows)
        same = _same_bits(outs[0][sl], outs[1][sl])
        # listed with the correctness criteria, before impact, as the gate always has
        crit.insert(sum(c.question == "correctness" for c in crit),
                    Criterion("deterministic", "correctness", same, True, same))
    return crit


def skipped_result(spec: KernelSpec, case: Case, reason: str) -> CaseResult:
    """The record of a case the kernel declares it does not support."""
    return CaseResult(kernel=spec.name, layer=LAYER, case=case.id, passed=None, skipped=reason)
