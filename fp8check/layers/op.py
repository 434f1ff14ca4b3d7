"""Layer 1 (single op): one kernel on one case, every criterion a named, reported metric.

Two questions, never mixed (see `fp8check.profiles`):

* correctness, against the bit-exact reference on the *same* quantized operands:
  - `finite`: no NaN/Inf unless the exact reference has them at the same place;
  - `bound_ratio` <= 1 (rigorous: any valid float32 summation order passes);
  - `error_ratio` <= 2 against a naive same-precision implementation (dequantized
    operands, one float32 np.matmul per group, rounded to the output dtype);
  - `bias_z` within the profile's limit (truncation instead of rounding is one-signed);
  - `deterministic`: two calls give the same bits (kernels that declare it);
  - `bit_exact` against `gmm(..., accum=<declared>)` on `exact_partials` cases;
  - `quantizer_bit_exact`: values and scales bit for bit equal to the recipe.
* quantization impact, FP8 (or bf16) result vs the unquantized float64 reference:
  SQNR (dB), calc_diff and allclose(atol, rtol) against the profile's thresholds.

Only rows below sum(group_sizes) of a [M,N] output are compared (DESIGN.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fp8check import metrics
from fp8check.cases import Case, CaseInputs, case_inputs
from fp8check.contracts import NUMPY_DTYPES, KernelSpec, call_kernel
from fp8check.profiles import IMPACT_REPORT_ONLY, Profile, sqnr_band

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

    def to_dict(self) -> dict[str, Any]:
        return {"question": self.question, "value": _jsonable(self.value),
                "limit": _jsonable(self.limit), "passed": self.passed}


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

    @property
    def failed_criteria(self) -> list[str]:
        return [c.name for c in self.criteria if not c.passed]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel, "layer": self.layer, "case": self.case,
            "passed": self.passed, "metrics": {k: _jsonable(v) for k, v in self.metrics.items()},
            "criteria": {c.name: c.to_dict() for c in self.criteria},
            "failed": self.failed_criteria, "skipped": self.skipped, "error": self.error,
            "repro": self.repro, "seconds": round(self.seconds, 4),
        }


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not np.isfinite(v):
        return str(v)  # JSON has no inf / nan
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    return v


# --- plain grouped matmuls: the naive same-precision baseline of error_ratio (float32) and
# the unquantized reference of the impact question (float64: its ~1e-16 relative error is
# negligible next to quantization noise of ~1e-2) -------------------------------------------


def grouped_matmul(lhs: np.ndarray, rhs: np.ndarray, group_sizes: np.ndarray,
                   dtype: type = np.float32) -> np.ndarray:
    """Per group lhs_g @ rhs[g], one np.matmul in `dtype` each; rows past the groups are 0."""
    a, b = lhs.astype(dtype), rhs.astype(dtype)
    res = np.zeros((lhs.shape[0], rhs.shape[2]), dtype)
    start = 0
    for g, size in enumerate(group_sizes.tolist()):
        res[start:start + size] = a[start:start + size] @ b[g]
        start += size
    return res


def grouped_tmatmul(lhs: np.ndarray, dy: np.ndarray, group_sizes: np.ndarray,
                    dtype: type = np.float32) -> np.ndarray:
    """Per group lhs_g^T @ dy_g, one np.matmul in `dtype` each: [G,K,N], zeros if empty."""
    a, d = lhs.astype(dtype), dy.astype(dtype)
    res = np.zeros((len(group_sizes), lhs.shape[1], dy.shape[1]), dtype)
    start = 0
    for g, size in enumerate(group_sizes.tolist()):
        res[g] = a[start:start + size].T @ d[start:start + size]
        start += size
    return res


# --- the problem each contract poses --------------------------------------------------------


@dataclass
class Problem:
    """Kernel arguments and everything the criteria compare against (numpy, float64 refs).

    `rows` is how many leading rows are compared (all of them for tgmm); `k` and `n_terms`
    feed the error bound.  A Problem depends only on (contract, case), so one serves every
    kernel of that contract; `accum_ref` memoises the reference under each declared recipe.
    """

    args: tuple[np.ndarray, ...]
    exact: np.ndarray
    abs_ab: np.ndarray
    naive: np.ndarray
    unquantized: np.ndarray
    rows: int
    k: int
    n_terms: int | None
    quantized: tuple[Any, Any] | None = None  # (lhs QTensor, rhs QTensor) for gmm-fp8
    _accum_refs: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)

    def accum_ref(self, accum: str, out_dtype: str) -> np.ndarray:
        """gmm(..., accum=accum) on the quantized operands, rounded to out_dtype."""
        from fp8check.references import gmm

        key = (accum, out_dtype)
        if key not in self._accum_refs:
            lq, rq = self.quantized
            self._accum_refs[key] = gmm(lq, rq, self.args[-1], out_dtype=NUMPY_DTYPES[out_dtype],
                                        accum=accum)
        return self._accum_refs[key]


def _naive(acc32: np.ndarray, case: Case) -> np.ndarray:
    """The naive implementation's float32 result rounded to the case's output dtype."""
    return acc32.astype(NUMPY_DTYPES[case.out_dtype])


def _gmm_fp8_problem(case: Case, inp: CaseInputs) -> Problem:
    from fp8check.references import abs_product, dequantize, gmm, quantize

    gs = inp.group_sizes
    lq = quantize(inp.x, (1, 128), case.recipe)
    rq = quantize(inp.w, (128, 128), case.recipe)
    return Problem(
        args=(lq.values, lq.scales, rq.values, rq.scales, gs),
        exact=gmm(lq, rq, gs, out_dtype=np.float64, accum="exact"),
        abs_ab=abs_product(lq, rq, gs),
        naive=_naive(grouped_matmul(dequantize(lq), dequantize(rq), gs), case),
        unquantized=grouped_matmul(inp.x, inp.w, gs, np.float64),
        rows=int(gs.sum()), k=case.k, n_terms=None, quantized=(lq, rq),
    )


def _gmm_bf16_problem(case: Case, inp: CaseInputs) -> Problem:
    from fp8check.references import abs_product, gmm

    gs = inp.group_sizes
    bf16 = NUMPY_DTYPES["bf16"]
    lhs, rhs = inp.x.astype(bf16), inp.w.astype(bf16)
    return Problem(
        args=(lhs, rhs, gs),
        exact=gmm(lhs, rhs, gs, out_dtype=np.float64, accum="exact"),
        abs_ab=abs_product(lhs, rhs, gs),
        naive=_naive(grouped_matmul(lhs, rhs, gs), case),
        unquantized=grouped_matmul(inp.x, inp.w, gs, np.float64),
        # No scales in a plain matmul: only the K-term sum rounds.
        rows=int(gs.sum()), k=case.k, n_terms=case.k,
    )


def _tgmm_problem(case: Case, inp: CaseInputs) -> Problem:
    from fp8check.references import tgmm

    gs = inp.group_sizes
    bf16 = NUMPY_DTYPES["bf16"]
    lhs, dy = inp.x.astype(bf16), inp.dy.astype(bf16)
    # The reduction runs over a group's rows: the longest group bounds every entry.
    k = max(int(gs.max(initial=0)), 1)
    return Problem(
        args=(lhs, dy, gs),
        exact=tgmm(lhs, dy, gs, out_dtype=np.float64),
        # |lhs_g|^T |dy_g| in float64: low by at most M_g 2^-53 relative, negligible next to
        # the bound's gamma_n >= n 2^-24.
        abs_ab=grouped_tmatmul(np.abs(lhs.astype(np.float64)), np.abs(dy.astype(np.float64)),
                               gs, np.float64),
        naive=_naive(grouped_tmatmul(lhs, dy, gs), case),
        unquantized=grouped_tmatmul(inp.x, inp.dy, gs, np.float64),
        rows=case.g, k=k, n_terms=k,
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


def _finite_mismatches(out: np.ndarray, exact: np.ndarray) -> int:
    """Elements where the kernel is non-finite and the reference is not, or vice versa, or
    both are infinite with different signs."""
    if np.isfinite(out).all() and np.isfinite(exact).all():
        return 0
    o, e = out.astype(np.float64), exact
    nan_bad = np.isnan(o) != np.isnan(e)
    inf_bad = np.isinf(o) != np.isinf(e)
    sign_bad = np.isinf(o) & np.isinf(e) & (np.sign(o) != np.sign(e))
    return int(np.count_nonzero(nan_bad | inf_bad | sign_bad))


def _ulp_histogram(ulps: np.ndarray) -> dict[str, int]:
    hist: dict[str, int] = {}
    lo = 0
    for hi in ULP_BINS[1:]:
        hist[f"{lo}" if hi == lo + 1 else f"{lo}-{hi - 1}"] = int(
            np.count_nonzero((ulps >= lo) & (ulps < hi)))
        lo = hi
    hist[f">={lo}"] = int(np.count_nonzero(ulps >= lo))
    return hist


def _correctness(
    spec: KernelSpec, case: Case, prob: Problem, out: np.ndarray, profile: Profile,
    m: dict[str, Any],
) -> list[Criterion]:
    sl = slice(0, prob.rows)
    o, exact = out[sl], prob.exact[sl]
    out_np = NUMPY_DTYPES[case.out_dtype]
    exact_rounded = exact.astype(out_np)  # correctly rounded: f64 -> f32 / bf16 is one RNE
    crit: list[Criterion] = []

    bad = _finite_mismatches(o, exact)
    m["nonfinite_mismatches"] = bad
    crit.append(Criterion("finite", "correctness", bad, 0, bad == 0))

    ratio = metrics.bound_ratio(
        o, exact, prob.abs_ab[sl], prob.k, u=spec.acc_unit_roundoff, out_dtype=out_np,
        n=prob.n_terms,
    )
    worst = float(np.max(ratio)) if ratio.size else 0.0
    m["bound_ratio_max"] = worst
    if ratio.size:
        m["bound_ratio_argmax"] = [int(i) for i in np.unravel_index(np.argmax(ratio), ratio.shape)]
    crit.append(Criterion("bound_ratio", "correctness", worst, profile.max_bound_ratio,
                          bool(worst <= profile.max_bound_ratio)))

    er = float(metrics.error_ratio(o, exact, prob.naive[sl]))
    m["error_ratio"] = er
    crit.append(Criterion("error_ratio", "correctness", er, profile.max_error_ratio,
                          bool(er <= profile.max_error_ratio)))

    if o.size >= 2:  # a t-statistic needs two samples
        # Against the correctly rounded exact value: a correct RNE output has zero-mean
        # error against it whatever the data, while against the unrounded exact value RNE
        # itself shows a data-determined bias when the data has few distinct values
        # (near-max blocks, M_g = 1 outer products).
        z = float(metrics.bias_z(o, exact_rounded))
        m["bias_z"] = z
        crit.append(Criterion("bias_z", "correctness", z, profile.max_abs_bias_z,
                              bool(abs(z) <= profile.max_abs_bias_z)))

    ulps = metrics.ulp_distance(o, exact_rounded, out_np)
    m["ulp_max_vs_exact"] = int(ulps.max(initial=0))
    m["ulp_histogram_vs_exact"] = _ulp_histogram(ulps)
    ref_close = metrics.allclose_report(o, exact, REF_ATOL, REF_RTOL)
    m["ref_allclose_fail_frac"] = float(ref_close.frac_fail)

    if spec.accum is not None and case.exact_partials:
        d = metrics.ulp_distance(o, prob.accum_ref(spec.accum, case.out_dtype)[sl], out_np)
        mism = int(np.count_nonzero(d))
        m["bit_exact_mismatches"] = mism
        m["bit_exact_accum"] = spec.accum
        crit.append(Criterion("bit_exact", "correctness", mism, 0, mism == 0))
    return crit


def _row_normalised(out: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """out and ref with each row (last axis) divided by the reference row's RMS; rows whose
    reference is all zero are dropped.  Per-token (1x128) quantization makes the row the
    unit of quantization error: without this a few large rows (lognormal-rows spans e^+-6)
    decide a global SQNR alone and it swings by several dB between seeds."""
    o, r = out.reshape(-1, out.shape[-1]), ref.reshape(-1, ref.shape[-1])
    rms = np.sqrt(np.mean(np.square(r), axis=1))
    keep = rms > 0
    return o[keep] / rms[keep, None], r[keep] / rms[keep, None]


def _impact(
    case: Case, prob: Problem, out: np.ndarray, profile: Profile, m: dict[str, Any]
) -> list[Criterion]:
    sl = slice(0, prob.rows)
    o, ref = out[sl].astype(np.float64), prob.unquantized[sl]
    if not np.any(ref):
        m["impact_note"] = "unquantized reference is all zero: nothing to measure"
        return []
    m["impact_sqnr_db_global"] = float(metrics.sqnr_db(ref, o))
    # SQNR, calc_diff and allclose on row-normalised values: atol is then in units of the
    # row's RMS (the source document's atol assumes unit-scale rows).
    on, rn = _row_normalised(o, ref)
    sqnr = float(metrics.sqnr_db(rn, on))
    cd = float(metrics.calc_diff(on, rn))
    close = metrics.allclose_report(on, rn, profile.impact_atol, profile.impact_rtol)
    m.update(impact_sqnr_db=sqnr, impact_band=sqnr_band(sqnr), impact_calc_diff=cd,
             impact_allclose_fail_frac=float(close.frac_fail))
    if case.distribution in IMPACT_REPORT_ONLY:
        m["impact_not_gated"] = IMPACT_REPORT_ONLY[case.distribution]
        return []
    return [
        Criterion("impact_sqnr_db", "impact", sqnr, profile.min_sqnr_db,
                  bool(sqnr >= profile.min_sqnr_db)),
        Criterion("impact_calc_diff", "impact", cd, profile.max_calc_diff,
                  bool(cd <= profile.max_calc_diff)),
        Criterion("impact_allclose", "impact", float(close.frac_fail),
                  profile.impact_max_fail_frac,
                  bool(close.frac_fail <= profile.impact_max_fail_frac)),
    ]


def _quantizer_criteria(spec: KernelSpec, inp: CaseInputs, m: dict[str, Any]) -> list[Criterion]:
    from fp8check.references import quantize

    x = inp.w if tuple(spec.block) == (128, 128) else inp.x
    x = x.astype(NUMPY_DTYPES[spec.in_dtype])
    ref = quantize(x, tuple(spec.block), spec.recipe, spec.fmt)
    runs = [call_kernel(spec, (x,)) for _ in range(2 if spec.deterministic else 1)]
    values, scales = runs[0]
    val_ok = _same_bits(np.asarray(values), ref.values)
    scale_ok = _same_bits(np.asarray(scales, dtype=np.float32), ref.scales) and (
        np.asarray(scales).dtype == np.float32)
    if not val_ok and np.asarray(values).shape == ref.values.shape:
        diff = np.asarray(values).view(np.uint8) != ref.values.view(np.uint8)
        m["value_mismatches"] = int(np.count_nonzero(diff))
    if not scale_ok and np.asarray(scales).shape == ref.scales.shape:
        m["scale_mismatches"] = int(np.count_nonzero(
            np.asarray(scales, np.float32).view(np.uint32) != ref.scales.view(np.uint32)))
    crit = [Criterion("quantizer_bit_exact", "correctness", val_ok and scale_ok, True,
                      val_ok and scale_ok)]
    if spec.deterministic:
        same = all(_same_bits(np.asarray(a), np.asarray(b)) for a, b in zip(*runs, strict=True))
        crit.append(Criterion("deterministic", "correctness", same, True, same))
    return crit


def build_problem(contract: str, case: Case) -> Problem:
    """Kernel arguments and references of `case` under a matmul contract."""
    inp = case_inputs(case)
    if contract == "gmm-fp8":
        return _gmm_fp8_problem(case, inp)
    if contract == "gmm":
        return _gmm_bf16_problem(case, inp)
    if contract == "tgmm":
        return _tgmm_problem(case, inp)
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
    try:
        if spec.contract == "quantizer":
            res.criteria = _quantizer_criteria(spec, case_inputs(case), m)
        else:
            prob = problem if problem is not None else build_problem(spec.contract, case)
            res.criteria = _matmul_criteria(spec, case, prob, profile, m)
    except _BadOutput as e:
        res.error = f"bad output: {e}"
    except Exception as e:  # the kernel under test may raise anything: report, don't crash
        res.error = f"{type(e).__name__}: {e}"
    res.passed = res.error is None and all(c.passed for c in res.criteria)
    res.seconds = time.perf_counter() - t0
    return res


class _BadOutput(Exception):
    """The kernel returned the wrong type, shape or dtype."""


def _matmul_criteria(
    spec: KernelSpec, case: Case, prob: Problem, profile: Profile, m: dict[str, Any]
) -> list[Criterion]:
    outs = []
    for _ in range(2 if spec.deterministic else 1):
        out = call_kernel(spec, prob.args, case.out_dtype)
        why = _shape_error(out, prob.exact.shape, case.out_dtype)
        if why is not None:
            raise _BadOutput(why)
        outs.append(out)
    crit = _correctness(spec, case, prob, outs[0], profile, m)
    if spec.deterministic:
        sl = slice(0, prob.rows)
        same = _same_bits(outs[0][sl], outs[1][sl])
        crit.append(Criterion("deterministic", "correctness", same, True, same))
    return crit + _impact(case, prob, outs[0], profile, m)


def skipped_result(spec: KernelSpec, case: Case, reason: str) -> CaseResult:
    """The record of a case the kernel declares it does not support."""
    return CaseResult(kernel=spec.name, layer=LAYER, case=case.id, passed=None, skipped=reason)
