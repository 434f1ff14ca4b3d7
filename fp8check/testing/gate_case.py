"""`GateCase`: one gate case as the value of the pytest plugin's `fp8check_case` fixture."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fp8check.contracts import (
    CONTRACTS_BY_NAME,
    NUMPY_DTYPES,
    MatmulClaims,
    check_claims,
    contract_of,
    declare,
    framework_dtype,
    to_framework,
)
from fp8check.gate.declarations import BareDeclarations
from fp8check.gate.repro import gate_command
from fp8check.inputs.cases import Case, CaseInputs, case_inputs
from fp8check.layers.op import LAYER, Problem, ProblemCache
from fp8check.measures.integrity import changes, inputs_criterion, merged, raw_bits
from fp8check.profiles import get_profile
from fp8check.results import CaseResult, Criterion
from fp8check.testing import recording
from fp8check.testing.engine import check_matmul
from fp8check.testing.inputs import as_array
from fp8check.testing.replay_record import ReplayRecord


@dataclass
class GateCase:
    """One case of a gate suite under a matmul contract: the value of the pytest
    `fp8check_case` fixture.  `args` are the kernel's arguments exactly as the gate
    passes them (numpy; `args_as("torch")` / `"jax"` converts them bit for bit) and
    `assert_matches(out)` applies the gate's criteria to the kernel's output on the
    gate's own Problem, so the verdict is the gate's (determinism aside: call the kernel
    twice and `assert_bitexact`).  Like the gate, it checks that the kernel left its
    inputs as handed: every `args` / `args_as` hands fresh copies, and `assert_matches`
    compares each one handed since the last assertion bit for bit with the case's
    arguments (`inputs_unchanged`, naming each argument written).

    `claims` are the kernel's (`MatmulClaims`), checked against the contract and resolved
    against `framework` once, when the GateCase is made (the jax default of
    `flushes_subnormals`, as a KernelSpec's); `kernel` (module:attr) and `framework` also
    fill in the gate repro line, which repeats the claims the gate's flags declare."""

    case: Case
    contract: str = "gmm-fp8"
    profile: str = "strict"
    suite: str = "ci"
    seed: int = 0
    kernel: str | None = None
    framework: str = "numpy"
    claims: MatmulClaims = MatmulClaims()
    _problems: ProblemCache = field(default_factory=lambda: ProblemCache(capacity=1),
                                    repr=False)
    # the argument tuples handed out since the last assert_matches
    _handed: list[tuple[Any, ...]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        known = CONTRACTS_BY_NAME.get(self.contract)
        if known is None or not known.matmul:
            matmuls = ", ".join(c.name for c in CONTRACTS_BY_NAME.values() if c.matmul)
            raise ValueError(f"fp8check_case: contract {self.contract!r} is not a matmul "
                             f"contract ({matmuls}); for quantizers use "
                             "assert_quantizer_matches on case.inputs")
        get_profile(self.profile)
        self.claims = self._judged(self.claims, {})

    @property
    def id(self) -> str:
        return self.case.id

    @property
    def problem(self) -> Problem:
        prob = self._problems.get(self.contract, self.case)[0]
        if not isinstance(prob, Problem):
            raise ValueError(f"case {self.id} is a streamed (production-shape) case: "
                             "check it with the gate, not fp8check.testing")
        return prob

    @property
    def args(self) -> tuple[np.ndarray, ...]:
        """The kernel's arguments as numpy arrays: fresh copies, as `args_as("numpy")`."""
        return self.args_as("numpy")

    @property
    def inputs(self) -> CaseInputs:
        """The case's unquantized float32 operands (x, w, dy, group_sizes)."""
        return case_inputs(self.case)

    @property
    def out_dtype(self) -> str:
        return self.case.out_dtype

    def args_as(self, framework: str) -> tuple[Any, ...]:
        """The kernel's arguments as "numpy", "jax" or "torch" arrays (fp8 as the
        framework's fp8 dtype), fresh copies on each call; `assert_matches` checks them."""
        handed = tuple(to_framework(a, framework) for a in self.problem.args)
        self._handed.append(handed)
        return handed

    def out_dtype_as(self, framework: str) -> Any:
        """The case's output dtype as `framework`'s dtype object (np.float32, torch.bfloat16)."""
        return framework_dtype(framework, self.case.out_dtype)

    def unsupported(self) -> str | None:
        """Why a kernel with the claimed out_dtypes / m_align skips this case (None: it
        runs it)."""
        c = self.case
        return self.claims.skip_reason(c.out_dtype, c.group_sizes, c.m)

    def gate_command(self) -> str:
        """The gate command that reruns this case on the kernel (module:attr)."""
        bare = BareDeclarations.of(self.contract, self.framework, self.claims)
        return gate_command(self.kernel or "<module:attr of your kernel>", LAYER,
                            suite=self.suite, seed=self.seed, profile=self.profile,
                            case=self.case.id, bare=bare)

    def _judged(self, claims: MatmulClaims, declared: Mapping[str, Any]) -> MatmulClaims:
        """`claims` with the claims `declared` over them, checked against the contract
        and resolved against the framework."""
        __tracebackhide__ = True
        judged = declare(claims, declared)
        check_claims(contract_of(self.contract), judged)
        return judged.resolved(self.framework)

    def assert_matches(self, out: Any, **declared: Any) -> CaseResult:
        """Assert the kernel's output on `args` passes the gate's criteria for this case,
        judged by `claims` with any claim given as a keyword by field name over them
        (`accum="deepgemm"`, `hopper_interval=64`, ...; `flushes_subnormals=None`: the
        framework's default)."""
        __tracebackhide__ = True
        claims = self._judged(self.claims, declared)
        contract = contract_of(self.contract)
        o = as_array(out, "out")
        prob = self.problem
        if o.dtype != NUMPY_DTYPES[prob.out_dtype] or o.shape != prob.exact.shape:
            raise ValueError(f"out is {o.dtype}{list(o.shape)}; case {self.case.id} expects "
                             f"{NUMPY_DTYPES[prob.out_dtype]}{list(prob.exact.shape)}")
        arrays = dict(zip((a.replay for a in contract.args), prob.args, strict=True))
        if prob.impact_not_gated is None:  # replay measures impact the same way
            inputs = self.inputs  # the unquantized operands: x and w (dy for tgmm)
            x, w = (getattr(inputs, op.source) for op in contract.operands)
            arrays.update(x=x, w=w)
        record = ReplayRecord(contract.replay, arrays | {"out": o}, self.profile, claims)
        scope = recording.current_scope()
        in_own_scope = scope is not None and scope.gate_case is self
        with nullcontext() if in_own_scope else recording.assertion_context(
                label=recording.current_label(), gate_case=self):
            return check_matmul(o, prob, record, first=self._inputs_criteria(prob))

    def _inputs_criteria(self, prob: Problem) -> list[Criterion]:
        """`inputs_unchanged` over the arguments handed since the last assertion (none
        handed: nothing to say), which it forgets."""
        if not self._handed:
            return []
        before = [raw_bits(a, copy=False) for a in prob.args]
        names = contract_of(self.contract).arg_names
        found = merged(*(changes(names, h, before) for h in self._handed))
        self._handed.clear()
        return [inputs_criterion(found)]
