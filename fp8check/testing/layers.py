"""`assert_layers_pass`: layers 2 and 3 of the gate around a user's kernels, from a test.

The same MoE layer, training model and criteria as `fp8check gate --kernel FWD --tgmm
--dgrad --layers 2,3` (`fp8check.layers.moe.user`; docs/layers-for-your-kernel.md), called
with the functions themselves instead of file targets.  Every result goes to the
`fp8check.testing` listeners (the pytest plugin's `--fp8check-report`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fp8check.contracts import KernelSpec, MatmulClaims
from fp8check.gate.declarations import BareDeclarations
from fp8check.gate.repro import gate_command
from fp8check.layers.moe import UserKernels, iter_layer2, user_matmuls
from fp8check.layers.training import iter_layer3
from fp8check.results import CaseResult
from fp8check.testing import recording

LAYERS = (2, 3)


def _why(res: CaseResult) -> str:
    if res.error:
        return res.error.strip().split("\n")[0]
    return "; ".join(f"{c.name} {c.verdict()}" for c in res.criteria if not c.passed)


def assert_layers_pass(
    forward: Callable[..., Any] | KernelSpec, *, framework: str | None = None,
    contract: str = "gmm-fp8", tgmm: Callable[..., Any] | None = None,
    dgrad: Callable[..., Any] | None = None, layers: Sequence[int] = LAYERS,
    suite: str = "smoke", seed: int = 0, profile: str = "strict",
    out_dtypes: Sequence[str] = ("f32",), kernel: str | None = None,
) -> list[CaseResult]:
    """Run gate layers `layers` (2: the MoE layer, 3: training) built around `forward`
    (a function of `contract` "gmm-fp8" or "gmm" in `framework` "jax" or "torch",
    declaring `out_dtypes`, or a KernelSpec, which declares all of that itself) and the
    backward kernels `tgmm` / `dgrad` (None: fp8check's bf16 reference backward, said in
    each result's `backward` metric).  Returns the results when every one passed; raises
    AssertionError naming each failed result's criteria (value and limit) and, when
    `kernel` ("module:attr" or "file.py:attr" of `forward`) is given, the gate command;
    ValueError for bad input."""
    __tracebackhide__ = True
    bad = [n for n in layers if n not in LAYERS]
    if bad or not layers:
        raise ValueError(f"layers must be a non-empty subset of {LAYERS}, got {list(layers)}")
    if isinstance(forward, KernelSpec):
        spec = forward
    else:
        if framework is None:
            raise ValueError("a bare forward function needs its framework (jax or torch)")
        spec = KernelSpec(name=kernel or str(getattr(forward, "__qualname__", "forward")),
                          contract=contract, framework=framework, fn=forward,
                          claims=MatmulClaims(out_dtypes=tuple(out_dtypes)))
    matmuls = user_matmuls(UserKernels(
        spec, dgrad=dgrad, tgmm=tgmm,
        dgrad_name=getattr(dgrad, "__qualname__", "dgrad"),
        tgmm_name=getattr(tgmm, "__qualname__", "tgmm")))
    results: list[CaseResult] = []
    for layer in sorted(set(layers)):
        run = iter_layer2 if layer == 2 else iter_layer3
        for res in run(matmuls, suite, seed, profile):
            recording.notify(res)
            results.append(res)
    failed = [r for r in results if r.passed is not True]
    if failed:
        lines = [f"{len(failed)} of {len(results)} layer results failed:"]
        lines += [f"  {r.kernel} {r.case}: {_why(r)}" for r in failed]
        if kernel is not None:
            bare = BareDeclarations.of(spec.contract, spec.framework, spec.matmul_claims)
            lines.append("Reproduce in the gate (add --tgmm / --dgrad FILE.py:NAME for your "
                         "backward kernels): " + gate_command(
                             kernel, failed[0].layer, suite=suite, seed=seed,
                             profile=profile, case=failed[0].case, bare=bare))
        raise AssertionError("\n".join(lines))
    return results
