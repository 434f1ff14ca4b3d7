"""Runs a gate plan: each layer's batches through one table, every result into one sink.

A batch is a group of results whose count is known before it runs (the progress bar's
total), produced by `results(start)` and given their repro commands by `repro`.  A layer-1
batch is one case, one result per kernel, each known before it is made: it can start past
any of them (`fp8check.gate.isolation` goes on after a kernel that ended its worker).
`run_batches` runs batches in this process (`--no-isolate`); `fp8check.gate.isolation`
runs the same batches in worker processes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from fp8check import registry
from fp8check.contracts import contract_of
from fp8check.errors import UsageError
from fp8check.gate.caught import next_result
from fp8check.gate.failure import failure_line
from fp8check.gate.kernels import LoadedKernel, LoadedKernels
from fp8check.gate.plan import GatePlan
from fp8check.gate.repro import gate_command
from fp8check.inputs import cases as cases_mod
from fp8check.inputs.cases import Case
from fp8check.layers.op import LAYER as OP_LAYER
from fp8check.layers.op import ProblemCache, skipped_result, validate_case
from fp8check.profiles import Profile, get_profile
from fp8check.results import CaseResult, JsonlStream


@dataclass(frozen=True)
class Batch:
    """`size` results of layer `layer`, produced by `results(start)` from the `start`-th
    on; `label` names it in the progress bar; `repro(result)` is the command that reruns a
    result.  `slots`: the (kernel, case) of each result, where known before it is made
    (then `results` takes any start); otherwise `results` takes only 0 and `owner` (a
    kernel or family name) names a result that ended before it was made.  `prepare`, when
    given, is run before the batch's results are asked for."""

    size: int
    label: str
    layer: int
    results: Callable[[int], Iterator[CaseResult]]
    repro: Callable[[CaseResult], str]
    owner: str = ""
    slots: tuple[tuple[str, str], ...] = ()
    # fp8check's own work before the first result (layer 1: the case's references), run
    # apart so that a result's timeout measures the kernel, not the references
    prepare: Callable[[], None] | None = None

    @property
    def resumable(self) -> bool:
        return bool(self.slots)

    def slot(self, j: int) -> tuple[str, str]:
        """(kernel, case) of the `j`-th result; case "" where it is not known in advance."""
        return self.slots[j] if j < len(self.slots) else (self.owner, "")


def _from_first(make: Callable[[], Iterator[CaseResult]]) -> Callable[[int], Iterator[CaseResult]]:
    """`results` of a batch that can only start at its first result."""
    def results(start: int) -> Iterator[CaseResult]:
        if start != 0:
            raise ValueError(f"this batch starts only at its first result, not at {start}")
        return make()
    return results


class Sink:
    """Where every result goes as it completes: the JSONL stream, the progress bar, the
    list for the final documents, and on stderr a FAIL line saying why (`failure_line`)
    with its repro on the next."""

    def __init__(self, stream: JsonlStream, bar: Any) -> None:
        self.stream, self.bar = stream, bar
        self.done: list[CaseResult] = []

    def __call__(self, res: CaseResult, repro: str) -> None:
        if res.passed is False:
            res.repro = repro
            self.bar.write(f"FAIL {res.kernel} {res.case}: {failure_line(res)}\n"
                           f"  repro: {repro}",
                           file=sys.stderr)
        elif res.passed is None and res.layer == 0:  # one per kernel: say why
            self.bar.write(f"SKIP {res.kernel} {res.case}: {res.skipped}", file=sys.stderr)
        self.stream.write(res.to_dict())
        self.done.append(res)
        self.bar.update(1)


def _kernel_repro(plan: GatePlan, k: LoadedKernel, layer: int, *, case: str | None = None,
                  target: str | None = None) -> str:
    """Rerun of one of `k`'s results; a bare function repeats its declarations."""
    c = plan.config
    bare = None if k.builtin else plan.options.bare
    if layer == 0:  # a compile has no seed, profile or backend
        return gate_command(k.origin, 0, suite=c.suite, target=target, bare=bare)
    return gate_command(k.origin, layer, suite=c.suite, seed=c.seed, profile=c.profile,
                        backend=c.backend, case=case, bare=bare)


# --- layer 0 ----------------------------------------------------------------------------------


def _layer0(plan: GatePlan, kernels: LoadedKernels) -> list[Batch]:
    from fp8check.layers import native

    family_kernels = {n for f in registry.FAMILIES for n in registry.family_kernels(f)}
    # Layer 0 compiles each family's own builds and every other kernel (a user's, a
    # third-party adapter) from its contract; it shards by family, the others go with
    # shard 1.
    others = ([k for k in kernels.kernels if k.origin not in family_kernels]
              if plan.shard[0] == 1 else [])
    by_name = {k.spec.name: k for k in others}

    def repro(res: CaseResult) -> str:
        target = str(res.metrics.get("target", ",".join(plan.targets)))
        if res.kernel in by_name:
            return _kernel_repro(plan, by_name[res.kernel], 0, target=target)
        return gate_command(res.kernel.split("-")[0], 0, suite=plan.config.suite, target=target)

    batches = native.plan_layer0(plan.in_shard(list(plan.families)), plan.config.suite,
                                 plan.targets, [k.spec for k in others])
    return [Batch(b.size, "layer 0 native compile", 0, _from_first(b.run), repro, b.owner)
            for b in batches]


# --- layer 1 ----------------------------------------------------------------------------------


def _needs_problem(k: LoadedKernel, case: Case) -> bool:
    """Whether `k`'s result on `case` compares with the case's shared Problem (its
    contract has one, `Contract.problem`, and `k` runs on the case)."""
    contract = contract_of(k.spec.contract)
    return contract.problem is not None and contract.skip_reason(k.spec, case) is None


def _op_result(k: LoadedKernel, case: Case, profile: Profile,
               problems: ProblemCache) -> CaseResult:
    """Layer 1 of one kernel on one case; the case's references come from `problems`
    (built once per contract and case) and their build time goes on the result that
    built them."""
    from fp8check.reports.plotdata import plot_data

    spec = k.spec
    contract = contract_of(spec.contract)
    reason = contract.skip_reason(spec, case)
    if reason is not None:
        return skipped_result(spec, case, reason)
    if contract.problem is None:  # a quantizer quantizes the case's operand itself
        return validate_case(spec, case, profile)
    try:
        prob, built = problems.get(spec.contract, case)
    except Exception as e:  # reported per result; the other contracts still run
        return CaseResult(kernel=spec.name, layer=OP_LAYER, case=case.id, passed=False,
                          error=f"reference failed: {type(e).__name__}: {e}")
    res = validate_case(spec, case, profile, prob, plots=plot_data)
    if built:
        res.timing["reference"] = built
        res.seconds += built
    return res


def _layer1_cases(plan: GatePlan) -> list[Case]:
    c = plan.config
    if plan.cases:
        return [cases_mod.find_case(c.suite, c.seed, cid) for cid in plan.cases]
    return plan.in_shard(cases_mod.build_suite(c.suite, c.seed))


def _layer1(plan: GatePlan, kernels: LoadedKernels) -> list[Batch]:
    """One batch per case: each kernel on it, in the plan's kernel order."""
    by_name = kernels.by_name()

    def repro(res: CaseResult) -> str:
        return _kernel_repro(plan, by_name[res.kernel], 1, case=res.case)

    profile = get_profile(plan.config.profile)
    # one problem per contract is live at a time: cases run one after another
    problems = ProblemCache(capacity=4)

    def batch(case: Case, ks: list[LoadedKernel]) -> Batch:
        def results(start: int) -> Iterator[CaseResult]:
            for k in ks[start:]:
                yield _op_result(k, case, profile, problems)

        def prepare() -> None:
            for k in ks:
                if _needs_problem(k, case):
                    problems.prepare(k.spec.contract, case)

        return Batch(len(ks), case.id[:60], OP_LAYER, results, repro,
                     slots=tuple((k.spec.name, case.id) for k in ks), prepare=prepare)

    # A case runs the kernels of the contracts it is for (a quantizer-only case, the
    # quantizers); a suite case no kernel of the run is for has no batch, and a `--case`
    # that names one is bad usage (it would check nothing).
    per_case = [(case, [k for k in kernels.kernels if case.applies_to(k.spec.contract)])
                for case in _layer1_cases(plan)]
    unserved = [case for case, ks in per_case if not ks]
    if plan.cases and unserved:
        raise UsageError(f"--case {unserved[0].id} is for {', '.join(unserved[0].contracts())} "
                         f"kernels only, and no such kernel is loaded")
    return [batch(case, ks) for case, ks in per_case if ks]


# --- layers 2 and 3 ---------------------------------------------------------------------------


def _layer_cases(plan: GatePlan, layer: int, family: str | None) -> list[str] | None:
    """Case ids of a layer-2/3 run of `family` (None: the user's layer kernels): --case,
    else this shard's (None = all).  Layer 2 shards by case; layer 3 by family, since its
    across-seed result needs every seed's run of the family in one process (the user's
    kernels go with shard 1)."""
    if plan.cases:
        return list(plan.cases)
    if plan.shard == (1, 1):
        return None
    if layer == 3:
        mine = (family in plan.in_shard(list(registry.FAMILIES)) if family is not None
                else plan.shard[0] == 1)
        return None if mine else []
    from fp8check.layers.moe import SUITES

    return plan.in_shard([s.case_id(plan.config.seed) for s in SUITES[plan.config.suite]])


def _family_layer(layer: int) -> Callable[[GatePlan, LoadedKernels], list[Batch]]:
    """Layer 2 (MoE layer) or 3 (training) of each of the plan's kernel families, then of
    the user's kernels (`LoadedKernels.layers`)."""
    def batches(plan: GatePlan, kernels: LoadedKernels) -> list[Batch]:
        from fp8check.layers.moe import VARIANTS, ExpertMatmuls, tested_variant, user_matmuls
        from fp8check.layers.moe.matmuls import FAMILY_FRAMEWORKS

        c = plan.config
        run: Callable[..., Iterator[CaseResult]]
        if layer == 2:
            from fp8check.layers.moe import iter_layer2, layer2_size

            run = iter_layer2
        else:
            from fp8check.layers.training import iter_layer3, layer3_size

            run = iter_layer3

        def size(framework: str, tested: tuple[str, ...], cases: list[str] | None) -> int:
            if layer == 2:
                return layer2_size(c.suite, cases, variants=len(tested))
            return layer3_size(c.suite, cases, seed=c.seed, framework=framework,
                               tested=tested)

        def batch(label: str, what: str | Callable[[], ExpertMatmuls], framework: str,
                  tested: tuple[str, ...], cases: list[str] | None,
                  repro: Callable[[CaseResult], str]) -> Batch:
            """A family (its name) or the user's matmuls (built in the worker, by `what`)."""
            def results() -> Iterator[CaseResult]:
                matmuls = what if isinstance(what, str) else what()
                return run(matmuls, c.suite, c.seed, c.profile, cases=cases)

            return Batch(size(framework, tested, cases), f"layer {layer} {label}", layer,
                         _from_first(results), repro, label)

        out = []
        for fam in plan.families:
            def family_repro(res: CaseResult, fam: str = fam) -> str:
                # case "": a result that ended before it was known; rerun the whole layer
                return gate_command(fam, layer, suite=c.suite, seed=c.seed, profile=c.profile,
                                    backend=c.backend, case=res.case or None)

            out.append(batch(fam, fam, FAMILY_FRAMEWORKS[fam],
                             VARIANTS, _layer_cases(plan, layer, fam), family_repro))
        user, origin = kernels.layers, plan.layer_kernel
        if user is not None and origin is not None:
            def user_repro(res: CaseResult) -> str:
                return gate_command(origin, layer, suite=c.suite, seed=c.seed,
                                    profile=c.profile, backend=c.backend,
                                    case=res.case or None, bare=plan.options.bare)

            out.append(batch(user.forward.name, lambda: user_matmuls(user),
                             user.forward.framework, (tested_variant(user.forward.contract),),
                             _layer_cases(plan, layer, None), user_repro))
        return out
    return batches


# Layer -> the batches it contributes to a plan (`fp8check.layers` holds the validators).
LAYER_BATCHES: dict[int, Callable[[GatePlan, LoadedKernels], list[Batch]]] = {
    0: _layer0, 1: _layer1, 2: _family_layer(2), 3: _family_layer(3)}


def plan_batches(plan: GatePlan, kernels: LoadedKernels) -> list[Batch]:
    """Every batch of the plan, layer by layer.  Raises ToolchainMissing (before anything
    runs) when layer 0 needs a compiler this machine lacks."""
    return [b for layer in sorted(plan.layers) for b in LAYER_BATCHES[layer](plan, kernels)]


def run_batches(batches: list[Batch], sink: Sink) -> None:
    """Every batch in this process, in order (`--no-isolate`)."""
    for batch in batches:
        sink.bar.set_description(batch.label)
        results = batch.results(0)
        while (res := next_result(results)) is not None:
            sink(res, batch.repro(res))
