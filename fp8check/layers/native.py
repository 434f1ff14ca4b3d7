"""Layer 0 (native compile): every kernel compiled for real targets, no hardware needed.

The targets are the rows of `fp8check.targets.chips.TARGETS`: TPU chips through libtpu's
deviceless AOT compiler (`fp8check.targets.tpu`), NVIDIA GPUs through Triton's AOT compiler
and the ptxas in its wheel (`fp8check.targets.cuda`).  One result per kernel x phase
(x tiling) x shape x target.  Criteria (limits: the target's row):

* `compiles`: the compiler accepts the kernel (its own message when not);
* TPU: `vmem_within_chip` (Mosaic's VMEM need against the chip's VMEM per core),
  `vmem_within_budget` (the project's 16 MiB), and on a chip whose MXU takes FP8 (v7x)
  `fp8_mxu_native` for FP8 kernels: the dot enters the MXU as FP8 (`e4m3b`), not
  converted to bf16 first.  On chips without an FP8 MXU (v5e, v6e, v5p) the MXU runs bf16
  whatever the kernel hands it, so the formats are reported, not judged;
* GPU: `smem_within_limit`, `registers_within_limit`, `no_spills`, for FP8 kernels
  `fp8_tensor_core` (an MMA of the target's family with e4m3/e5m2 operands: `wgmma` on
  sm_90a, `tcgen05.mma .kind::f8f6f4` on sm_100a) and `no_mma_sync`; `tmem_within_limit`
  where the target has tensor memory and the kernel allocates it; `tma` where the kernel
  claims tensor descriptors.

A figure a criterion needs that the compile did not produce fails the criterion: nothing
missing passes.  Compiling is not running: a pass here says the kernel is valid for the
target and uses its FP8 path, not that it computes the right numbers there (layer 1 on the
hardware says that).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from fp8check.contracts import (
    KernelSpec,
    MatmulClaims,
    QuantizerClaims,
    contract_of,
    framework_dtype,
    takes_out_dtype,
)
from fp8check.inputs.cases import SUITE_SHAPES
from fp8check.results.model import CaseResult, Criterion
from fp8check.targets.chips import TARGETS, gpu_targets, target, tpu_targets
from fp8check.targets.cuda import CudaBuild, fp8_mma
from fp8check.targets.tpu import TpuBuild

LAYER = 0


@dataclass(frozen=True)
class NativeShape:
    """A problem to compile for: lhs [m, k], rhs [g, k, n]."""

    name: str
    m: int
    k: int
    n: int
    g: int

    def sizes(self) -> dict[str, int]:
        """The sizes by the names a contract's argument table uses (`Contract.arg_shapes`)."""
        return {"m": self.m, "k": self.k, "n": self.n, "g": self.g}


# The production MoE model's shapes: wi (M=65536 routed rows, K=2048 d_model, N=512 d_ff,
# G=256 experts), wo (K and N swapped), and the EP=8 dev shard of wi (M=8192, G=32).
PRODUCTION = (NativeShape("wi-prod", 65536, 2048, 512, 256),
              NativeShape("wo-prod", 65536, 512, 2048, 256),
              NativeShape("wi-dev", 8192, 2048, 512, 32))


def layer0_shapes(suite: str) -> list[NativeShape]:
    """The suite's shapes (both aspects, each G) and the production shapes."""
    s = SUITE_SHAPES[suite]
    own = [NativeShape(f"{aspect}-m{s.m}-k{k}-n{n}-g{g}", s.m, k, n, g)
           for aspect, (k, n) in (("wi", s.wi), ("wo", s.wo)) for g in s.gs]
    return own + list(PRODUCTION)


def _holds(name: str, value: Any, meaning: str) -> Criterion:
    """A yes/no fact of the build that must hold."""
    return Criterion.check(name, "native", bool(value), "==", True, meaning=meaning)


def _at_most(name: str, value: int | None, limit: int, meaning: str) -> Criterion:
    """value <= limit; a missing value fails."""
    return Criterion.check(name, "native", value, "<=", limit, meaning=meaning)


def native_fp8_format(fmt: str) -> bool:
    """An LLO MXU data format that is FP8 into the MXU itself (`e4m3b`), not one converted
    on the way in (`e4m3b_to_bf16`) or a wider type."""
    return fmt.startswith(("e4m3", "e5m2")) and "_to_" not in fmt


def tpu_criteria(b: TpuBuild, *, fp8_feed: str | None, mosaic: bool,
                 budget: int | None) -> list[Criterion]:
    """Layer 0's criteria for one TPU build (module docstring).  `fp8_feed`, judged only on
    a chip whose MXU takes FP8: "all" (every MXU data format of the program must be a
    native FP8 one), "any" (at least one: a program that also holds bf16 kernels) or None;
    `budget` the project's VMEM budget for its own kernels (None: a user kernel, only the
    chip's VMEM applies)."""
    chip = target(b.target)
    crit = [_holds("compiles", b.ok, f"the program compiles for {b.target}")]
    if not b.ok or not mosaic:
        return crit
    crit.append(_at_most("vmem_within_chip", b.vmem_bytes, b.vmem_capacity_bytes or 0,
                         "VMEM bytes Mosaic allocates, against the chip's VMEM"))
    if budget is not None:
        crit.append(_at_most("vmem_within_budget", b.vmem_bytes, budget,
                             "VMEM bytes Mosaic allocates, against the project's budget"))
    if fp8_feed is not None and chip.fp8_mxu:
        formats = b.llo.matmul_formats if b.llo else ()
        fp8 = [native_fp8_format(f) for f in formats]
        ok = bool(fp8) and (all(fp8) if fp8_feed == "all" else any(fp8))
        why = ("" if ok else f": the dot reaches {chip.name}'s FP8 MXU as "
               f"{','.join(formats) or 'no MXU op'}; an FP8 kernel that converts its "
               f"operands before the dot loses the FP8 MXU rate it exists for")
        crit.append(_holds("fp8_mxu_native", ok, f"{fp8_feed} of the MXU data formats "
                           f"({','.join(formats) or 'none'}) native FP8 (e4m3b/e5m2b){why}"))
    return crit


def tpu_metrics(b: TpuBuild) -> dict[str, Any]:
    """The build's figures as flat scalars (the report's tables take scalars)."""
    m: dict[str, Any] = {"target": b.target, "compile_seconds": round(b.seconds, 3),
                         **{f"hbm_{k.removesuffix('_in_bytes')}_bytes": v
                            for k, v in b.memory.items()}}
    if b.vmem_bytes is not None:
        m["vmem_bytes"] = b.vmem_bytes
        m["vmem_capacity_bytes"] = b.vmem_capacity_bytes
    if b.llo is not None:
        m.update({"llo_kernels": b.llo.kernels, "llo_vmatmul": b.llo.vmatmul,
                  "llo_vector_alu": b.llo.vector_alu, "llo_vector_load": b.llo.vector_load,
                  "llo_vector_store": b.llo.vector_store,
                  "mxu_formats": ",".join(b.llo.matmul_formats),
                  "llo_fused_multiply_add": b.llo.fused_multiply_add})
    elif b.llo_missing:
        m["llo_missing"] = b.llo_missing
    return m


def _result(kernel: str, case: str, crit: list[Criterion], metrics: dict[str, Any],
            error: str | None, seconds: float) -> CaseResult:
    res = CaseResult(kernel=kernel, layer=LAYER, case=case, passed=None, metrics=metrics,
                     criteria=crit, error=error, seconds=seconds)
    res.decide()
    return res


def _pallas(builds: Sequence[Any], shape: NativeShape,
            chips: Sequence[str]) -> Iterator[CaseResult]:
    """Each of one shape's Pallas builds (`kernels.pallas.native`) on each chip."""
    from fp8check.kernels.pallas.tiling import VMEM_BUDGET_BYTES
    from fp8check.targets.tpu import compile_for_tpu

    for build in builds:
        for chip in chips:
            b = compile_for_tpu(build.kernel, build.fn, build.args, chip)
            crit = tpu_criteria(b, fp8_feed=build.fp8_feed, mosaic=build.mosaic,
                                budget=VMEM_BUDGET_BYTES)
            yield _result(build.kernel, f"{build.label}-{shape.name}-{chip}", crit,
                          {"phase": build.phase, **tpu_metrics(b)}, b.error, b.seconds)


def gpu_criteria(b: CudaBuild, *, fp8: bool, claims_tma: bool) -> list[Criterion]:
    """Layer 0's criteria for one GPU build (module docstring), limits from its target."""
    gpu = target(b.target)
    crit = [_holds("compiles", b.ok, f"the kernel compiles for {b.target}")]
    if not b.ok:
        return crit
    spills = (None if b.spill_stores_bytes is None or b.spill_loads_bytes is None
              else b.spill_stores_bytes + b.spill_loads_bytes)
    crit += [_at_most("smem_within_limit", b.shared_bytes, gpu.limit("smem_bytes"),
                      "shared-memory bytes per block"),
             _at_most("registers_within_limit", b.registers, gpu.limit("registers"),
                      "registers per thread"),
             _at_most("no_spills", spills, gpu.limit("spill_bytes"),
                      "spill store + load bytes")]
    family = gpu.fp8_instruction or ""
    if fp8:
        ours = [s for s in b.mma_shapes if s.startswith(f"{family} ") and fp8_mma(s)]
        crit += [_holds("fp8_tensor_core", bool(ours),
                        f"the FP8 dot is {family} with e4m3/e5m2 operands "
                        f"({','.join(b.mma_shapes) or 'no tensor-core MMA'})"),
                 _holds("no_mma_sync", not b.mma_sync, "no mma.sync fallback in the PTX")]
    if "tmem_columns" in gpu.limits and any(s.startswith("tcgen05 ") for s in b.mma_shapes):
        crit.append(_at_most("tmem_within_limit", b.tmem_columns, gpu.limit("tmem_columns"),
                             "tensor-memory columns tcgen05.alloc asks for"))
    if claims_tma:
        crit.append(_holds("tma", b.tma, "the kernel loads through TMA, as it claims"))
    return crit


def gpu_metrics(b: CudaBuild) -> dict[str, Any]:
    """A GPU build's figures as flat scalars."""
    keys = ("target", "shared_bytes", "registers", "spill_stores_bytes", "spill_loads_bytes",
            "global_scratch_bytes", "mma_fp8", "mma_sync", "tma", "tmem_columns",
            "max_num_imprecise_acc")
    m = {k: getattr(b, k) for k in keys}
    m["mma_shapes"] = ",".join(b.mma_shapes)
    m["compile_seconds"] = round(b.seconds, 3)
    return m


def _triton(builds: Sequence[Any], shape: NativeShape, gpu: str) -> Iterator[CaseResult]:
    """One shape's Triton builds (`kernels.triton.native`) compiled for the GPU target
    `gpu` in one compile process."""
    from fp8check.targets.cuda import compile_many

    capability = target(gpu).capability
    assert capability is not None  # a CUDA row
    for build, b in zip(builds, compile_many(b.job(capability) for b in builds), strict=True):
        crit = gpu_criteria(b, fp8=build.fp8, claims_tma=build.claims_tma)
        phase = build.phase + (f"-{build.variant.split()[0]}" if build.variant else "")
        yield _result(build.kernel, f"{phase}-{shape.name}-{gpu}", crit,
                      {"phase": build.phase, **gpu_metrics(b)}, b.error, b.seconds)


def _user_tpu(spec: KernelSpec, shape: NativeShape,
              chips: Sequence[str]) -> Iterator[CaseResult]:
    from fp8check.targets.tpu import compile_for_tpu

    contract = contract_of(spec.contract)
    fn = spec.native_fn or spec.fn
    claims = spec.claims
    if isinstance(claims, MatmulClaims) and takes_out_dtype(fn):
        fn = functools.partial(fn, out_dtype=framework_dtype("jax", claims.out_dtypes[0]))
    in_dtype = claims.in_dtype if isinstance(claims, QuantizerClaims) else None
    for chip in chips:
        b = compile_for_tpu(spec.name, fn, contract.arg_shapes(shape.sizes(), in_dtype), chip)
        crit = tpu_criteria(b, fp8_feed="all" if contract.fp8 else None,
                            mosaic=b.llo is not None, budget=None)
        yield _result(spec.name, f"{spec.contract}-{shape.name}-{chip}", crit,
                      tpu_metrics(b), b.error, b.seconds)


def _user_gpu(spec: KernelSpec, jobs: Sequence[Any], shape: NativeShape,
              gpu: str) -> Iterator[CaseResult]:
    """A torch kernel's `cuda_jobs` at one shape, compiled for the GPU target `gpu` (the
    jobs' own capability is replaced by the target's)."""
    from fp8check.targets.cuda import compile_many

    jobs = [dataclasses.replace(job, capability=target(gpu).capability) for job in jobs]
    for job, b in zip(jobs, compile_many(jobs), strict=True):
        crit = gpu_criteria(b, fp8=contract_of(spec.contract).fp8, claims_tma=False)
        yield _result(spec.name, f"{job.name}-{shape.name}-{gpu}", crit,
                      gpu_metrics(b), b.error, b.seconds)


def _skipped(spec: KernelSpec, why: str) -> Iterator[CaseResult]:
    yield CaseResult(kernel=spec.name, layer=LAYER, case="native", passed=None, skipped=why)


def check_toolchains(families: Sequence[str], targets: Sequence[str],
                     specs: Sequence[KernelSpec] = ()) -> None:
    """Raise ToolchainMissing (one line, exit 2) if a compiler the run needs is absent:
    libtpu for the Pallas family or a JAX user kernel with a TPU target, Triton's ptxas for
    the Triton family or a user kernel with `cuda_jobs` with a GPU target."""
    chips, gpus = tpu_targets(targets), gpu_targets(targets)
    if chips and ("pallas" in families or any(s.framework == "jax" for s in specs)):
        from fp8check.targets import tpu

        tpu.check_toolchain()
    if gpus and ("triton" in families or any(s.cuda_jobs is not None for s in specs)):
        from fp8check.targets import cuda

        for gpu in gpus:
            assert gpu.capability is not None  # a CUDA row
            cuda.check_toolchain(gpu.capability)


@dataclass(frozen=True)
class Batch:
    """Layer-0 results that are compiled together: `size` of them, yielded by `run()`, of
    the kernel family or the kernel named `owner`."""

    size: int
    run: Callable[[], Iterator[CaseResult]]
    owner: str


def plan_layer0(families: Sequence[str], suite: str, targets: Sequence[str] = tuple(TARGETS),
                specs: Sequence[KernelSpec] = ()) -> list[Batch]:
    """Layer 0 of the named kernel families and of other kernels `specs` (a user's, an
    adapter), as batches whose sizes are known before anything compiles (the progress
    bar's total); each build list is made once.  Raises ToolchainMissing first when a
    compiler the plan needs is absent.

    Other kernels: a JAX kernel is compiled for the TPU chips from its contract's
    arguments at each shape; a torch kernel that declares `cuda_jobs` for each GPU target;
    any other gives one skipped result saying why (skipped is never passed)."""
    check_toolchains(families, targets, specs)
    shapes = layer0_shapes(suite)
    chips = [t.name for t in tpu_targets(targets)]
    gpus = [t.name for t in gpu_targets(targets)]
    plan: list[Batch] = []
    for shape in shapes:
        if "pallas" in families and chips:
            from fp8check.kernels.pallas.native import native_builds

            builds = native_builds(shape.m, shape.k, shape.n, shape.g)
            plan.append(Batch(len(builds) * len(chips),
                              functools.partial(_pallas, builds, shape, chips), "pallas"))
        if "triton" in families and gpus:
            from fp8check.kernels.triton.native import native_builds as triton_builds

            t_builds = triton_builds(shape.m, shape.k, shape.n, shape.g)
            plan += [Batch(len(t_builds), functools.partial(_triton, t_builds, shape, t),
                           "triton") for t in gpus]
    for spec in specs:
        if spec.framework == "jax" and chips:
            plan += [Batch(len(chips), functools.partial(_user_tpu, spec, shape, chips),
                           spec.name) for shape in shapes]
        elif spec.framework == "torch" and gpus and spec.cuda_jobs is not None:
            for shape in shapes:
                jobs = list(spec.cuda_jobs(shape.m, shape.k, shape.n, shape.g))
                plan += [Batch(len(jobs), functools.partial(_user_gpu, spec, jobs, shape, t),
                               spec.name) for t in gpus]
        elif spec.framework == "torch" and gpus:
            plan.append(Batch(1, functools.partial(
                _skipped, spec, f"layer 0: a torch kernel compiles for {', '.join(gpus)} only "
                                f"when its KernelSpec declares cuda_jobs (docs/native.md)"),
                spec.name))
        else:
            plan.append(Batch(1, functools.partial(
                _skipped, spec, f"layer 0: no native target among {', '.join(targets)} for "
                                f"a {spec.framework} kernel"), spec.name))
    return plan


def iter_layer0(families: Sequence[str], suite: str, targets: Sequence[str] = tuple(TARGETS),
                specs: Sequence[KernelSpec] = ()) -> Iterator[CaseResult]:
    """Every result of `plan_layer0`, yielded as each compile finishes."""
    for batch in plan_layer0(families, suite, targets, specs):
        yield from batch.run()
