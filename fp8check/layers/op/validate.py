"""Layer 1 (single op): one kernel on one case, every criterion a named, reported metric."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from fp8check.contracts import (
    CONTRACT_DOC,
    NUMPY_DTYPES,
    KernelSpec,
    contract_of,
    run_kernel,
    takes_out_dtype,
)
from fp8check.inputs.cases import Case, CaseInputs, case_inputs
from fp8check.layers.op.criteria import (
    BadOutput,
    PlotHook,
    criterion,
    output_criteria,
    quantizer_output_criteria,
    returned,
    same_bits,
    shape_error,
)
from fp8check.layers.op.problem import AnyProblem, StreamedProblem, build_problem
from fp8check.layers.op.streamed import streamed_output_criteria
from fp8check.measures.integrity import InputChange, describe, inputs_criterion, merged
from fp8check.profiles import Profile
from fp8check.references.quant import BLOCK
from fp8check.results.model import CaseResult, Criterion

LAYER = 1


def validate_case(
    spec: KernelSpec, case: Case, profile: Profile, problem: AnyProblem | None = None, *,
    plots: PlotHook | None = None,
) -> CaseResult:
    """Run `spec` on `case` (twice when it declares determinism) and apply every criterion.

    Args:
        spec: the kernel and its claims, which the criteria get as they are.
        case: the case; its inputs are regenerated from its fields.
        profile: the limits the criteria apply.
        problem: `build_problem(spec.contract, case)`, shared between the kernels of a
            contract (built here when None; unused by a quantizer).  A streamed case's
            StreamedProblem is checked chunk by chunk (`op.streamed`: the criteria whose
            references are streamed, no plots).
        plots: makes the report's plot data of the output (`criteria.PlotHook`).

    Returns:
        The layer-1 result.  A kernel exception or a wrong output shape/dtype is a failed
        result with `error` set, never a crash.  ValueError (bad usage) for a case that is
        not for the kernel's contract (`Case.applies_to`).
    """
    if not case.applies_to(spec.contract):
        raise ValueError(f"case {case.id} is not for the {spec.contract} contract of "
                         f"{spec.name}: it is for {', '.join(case.contracts())}")
    t0 = time.perf_counter()
    res = CaseResult(kernel=spec.name, layer=LAYER, case=case.id, passed=None)
    m = res.metrics
    m.update(group_sizes=list(case.group_sizes), out_dtype=case.out_dtype, recipe=case.recipe,
             exact_partials=case.exact_partials)
    timing = res.timing
    try:
        if contract_of(spec.contract).problem is None:  # a quantizer: no shared Problem
            res.criteria = _quantizer_criteria(spec, case_inputs(case), m)
        else:
            prob = problem
            if prob is None:
                t = time.perf_counter()
                prob = build_problem(spec.contract, case)
                timing["reference"] = time.perf_counter() - t
            res.criteria = _matmul_criteria(spec, case, prob, profile, m, timing, plots)
    except BadOutput as e:
        res.error = f"bad output: {e} (the kernel contract: {CONTRACT_DOC})"
    except Exception as e:  # the kernel under test may raise anything: report, don't crash
        # as text every document can hold (a message may carry lone surrogates)
        res.error = f"{type(e).__name__}: {e}".encode("utf-8", "backslashreplace").decode()
    res.decide()
    res.seconds = time.perf_counter() - t0
    if "kernel" in timing:
        timing["metrics"] = max(0.0, res.seconds - sum(timing.values()))
    return res


def _matmul_criteria(
    spec: KernelSpec, case: Case, prob: AnyProblem, profile: Profile, m: dict[str, Any],
    timing: dict[str, float], plots: PlotHook | None,
) -> list[Criterion]:
    claims = spec.matmul_claims
    outs, written = [], []
    shape = prob.out_shape if isinstance(prob, StreamedProblem) else prob.exact.shape
    t = time.perf_counter()
    for _ in range(2 if claims.deterministic else 1):
        call = run_kernel(spec, prob.args, case.out_dtype)
        out = call.out
        written.append(call.inputs_changed)
        why = shape_error(out, shape, case.out_dtype)
        if why is not None:
            wrong_dtype_only = isinstance(out, np.ndarray) and out.shape == shape
            raise BadOutput(why + (_dtype_hint(spec, case.out_dtype) if wrong_dtype_only else "")
                            + _written_note(merged(*written)))
        outs.append(out)
    timing["kernel"] = time.perf_counter() - t
    if isinstance(prob, StreamedProblem):
        m["plots_note"] = "streamed case: no per-case plots (they need [M, N] references)"
        crit = streamed_output_criteria(outs[0], prob, profile, m, claims=claims)
    else:
        crit = output_criteria(outs[0], prob, profile, m, claims=claims, plots=plots)
    if claims.deterministic:
        sl = slice(0, prob.rows)
        same = same_bits(outs[0][sl], outs[1][sl])
        # listed with the correctness criteria, before impact, as the gate always has
        crit.insert(sum(c.question == "correctness" for c in crit),
                    criterion("deterministic", same, "==", True))
    # first: every other criterion judges an output computed from inputs it overwrote
    crit.insert(0, inputs_criterion(merged(*written)))
    return crit


def _written_note(written: list[InputChange]) -> str:
    """What a bad-output message adds about the inputs the kernel wrote, if any."""
    return f"; it also wrote into its inputs: {describe(written)}" if written else ""


def _dtype_hint(spec: KernelSpec, out_dtype: str) -> str:
    """What to do about a kernel that returned another dtype than the case's `out_dtype`:
    a failure, never a skip (a kernel runs on every output dtype it has not declared away)."""
    how = (f"it was called with out_dtype={out_dtype}" if takes_out_dtype(spec.fn) else
           "it takes no out_dtype keyword, so it must return the case's dtype")
    return (f" on a {out_dtype} case; {how}: declare the dtypes it returns with "
            f"--out-dtypes (MatmulClaims.out_dtypes)")


def _quantizer_criteria(spec: KernelSpec, inp: CaseInputs, m: dict[str, Any]) -> list[Criterion]:
    claims = spec.quantizer_claims
    x = inp.w if claims.block == (BLOCK, BLOCK) else inp.x
    x = x.astype(NUMPY_DTYPES[claims.in_dtype])
    calls = [run_kernel(spec, (x,)) for _ in range(2 if claims.deterministic else 1)]
    runs = [c.out for c in calls]
    written = merged(*(c.inputs_changed for c in calls))
    if not (isinstance(runs[0], tuple) and len(runs[0]) == 2):
        raise BadOutput(f"returned {returned(runs[0])}, expected a tuple (values, scales)"
                        + _written_note(written))
    values, scales = runs[0]
    crit = [inputs_criterion(written)]
    crit += quantizer_output_criteria(values, scales, x, claims, m)
    if claims.deterministic:
        same = all(same_bits(np.asarray(a), np.asarray(b)) for a, b in zip(*runs, strict=True))
        crit.append(criterion("deterministic", same, "==", True))
    return crit


def skipped_result(spec: KernelSpec, case: Case, reason: str) -> CaseResult:
    """The record of a case the kernel declares it does not support."""
    return CaseResult(kernel=spec.name, layer=LAYER, case=case.id, passed=None, skipped=reason)
