"""The one path every assert ends on: criteria -> `CaseResult` -> listeners -> the
AssertionError.  Each frame on the way to the raise sets `__tracebackhide__`, so pytest
shows the user's test line and the message, not fp8check's internals."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fp8check.contracts import MatmulClaims
from fp8check.layers.op import LAYER, Problem, output_criteria
from fp8check.layers.op.locations import Locate, in_gmm_output, in_tgmm_output
from fp8check.profiles import get_profile
from fp8check.results import CaseResult, Criterion
from fp8check.testing import recording
from fp8check.testing.message import failure_message
from fp8check.testing.replay_record import ReplayRecord, replay_command


def check_matmul(out: np.ndarray, prob: Problem, record: ReplayRecord,
                 first: Sequence[Criterion] = ()) -> CaseResult:
    """Apply the gate's output criteria to `out` on `prob` (a "gmm" or "tgmm" `record`,
    whose arrays include `out` and the group sizes, and whose resolved claims go to the
    criteria as they are) after the criteria `first` (the kernel's `inputs_unchanged`,
    where it was handed its inputs) and conclude.  ValueError for an output the claims
    exclude (an output dtype or group sizes they do not declare:
    `MatmulClaims.skip_reason`, what the gate skips)."""
    __tracebackhide__ = True
    from fp8check.reports.plotdata import plot_data

    claims = record.claims
    if not isinstance(claims, MatmulClaims):
        raise ValueError(f"the {record.kind} record lacks its matmul claims")
    prof = get_profile(record.need("profile"))
    gs = prob.group_sizes
    excluded = claims.skip_reason(prob.out_dtype, gs.tolist(), prob.args[0].shape[0])
    if excluded is not None:
        raise ValueError(f"the kernel's claims exclude this output: {excluded}")
    m: dict[str, Any] = {"group_sizes": gs.tolist(), "out_dtype": prob.out_dtype,
                         "exact_partials": prob.exact_partials,
                         "n_compared": int(out[:prob.rows].size)}
    crit = [*first, *output_criteria(out, prob, prof, m, claims=claims, plots=plot_data)]
    if claims.accum is not None and not prob.exact_partials:
        m["bit_exact_note"] = ("partials not provably exact in float32 on this data: "
                               "bit_exact not checked (the error bound still is)")
    locate = in_gmm_output(gs) if record.kind == "gmm" else in_tgmm_output(gs)
    return conclude(record, crit, m, locate)


def conclude(record: ReplayRecord, criteria: list[Criterion], metrics: dict[str, Any],
             locate: Locate) -> CaseResult:
    """Make the `CaseResult` (labelled by the current assertion scope), hand it to the
    listeners and return it; when it failed, save `record`, then raise the
    AssertionError whose message `failure_message` writes."""
    __tracebackhide__ = True
    scope = recording.begin_assertion()
    gate = scope.gate_case
    label = scope.label or f"fp8check.testing.{record.kind}"
    case = gate.id if gate is not None else _shape_label(record)
    if scope.count > 1:
        case += f" #{scope.count}"
    res = CaseResult(kernel=label, layer=LAYER, case=case, passed=None, metrics=metrics,
                     criteria=criteria)
    res.decide()
    message = None
    if not res.passed:
        res.repro = replay_command(record.save(recording.failure_dir()))
        message = failure_message(record.kind, res, locate, record.profile,
                                  gate.gate_command() if gate is not None else None)
    recording.notify(res)
    if message is not None:
        raise AssertionError(message)
    return res


def _shape_label(record: ReplayRecord) -> str:
    """The report's case name of an assertion outside a gate case."""
    a = record.arrays
    if record.kind in ("gmm", "tgmm"):
        o = a["out"]
        return f"{record.kind} out{list(o.shape)} {o.dtype} groups={a['group_sizes'].tolist()}"
    if record.kind == "quantizer":
        return f"quantizer x{list(a['x'].shape)} {a['x'].dtype}"
    return f"bitexact {a['a'].dtype}{list(a['a'].shape)}"
