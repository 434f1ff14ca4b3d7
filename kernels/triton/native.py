"""The shipped Triton kernels as native (sm_90a) builds, for compiling without a GPU.

`native_builds(m, k, n, g)` gives, for every kernel of the family, the @triton.jit
function and exactly what its wrapper's launch hands Triton at that shape with the
wrappers' default block sizes: the wrapper's own launch helper (`gmm.gmm_fp8_launch`,
`backward.dgrad_launch`, `backward.tgmm_launch`, `quantize.quantize_launch`) is called on
meta tensors (no memory), and Triton's own launcher specialization turns those arguments
into the signature (``"*fp8e4nv"``, ``"i32"``, ``"constexpr"``), the constexprs (an integer
argument equal to 1 becomes one, as at launch) and the 16-byte divisibility attributes.
num_warps / num_stages are what the wrappers launch with: Triton's defaults, except the
FP8 GEMM's `gmm.NUM_WARPS`.
Pointers are taken to be 16-byte aligned, as fresh allocations are (and as TMA requires).

`fp8` says the kernel must use the FP8 tensor-core path; `claims_tma` that its source
builds tensor descriptors (``tl.make_tensor_descriptor``), which on sm_90 must become TMA.
`dot_max_num_imprecise_acc` is the source of the ``max_num_imprecise_acc`` argument the
kernel passes to ``tl.dot`` (None: it passes none, so Triton's default for the target
applies, ``2**30`` on sm_90: an FP8 WGMMA chain never promotes inside one tl.dot; the
FP8 GEMM promotes itself, one tl.dot per 128-wide K block, see `gmm`).

Compile them with `compile_native_builds` (or ``fp8check.targets.cuda.compile_many`` on
``[b.job() for b in builds]``).  Compiling is not running.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass
from typing import Any

import torch
import triton

from fp8check.targets.cuda import CudaBuild, CudaJob, compile_many

from ._common import QBLOCK
from .backward import _dgrad_kernel, _tgmm_kernel, dgrad, dgrad_launch, tgmm, tgmm_launch
from .gmm import NUM_WARPS, _gmm_fp8_kernel, gmm_fp8, gmm_fp8_launch
from .padding import gmm_fp8_padded, padded_sizes
from .quantize import BLOCKS, _quantize_kernel, quantize_fp8, quantize_launch


@dataclass(frozen=True)
class TritonBuild:
    """One launch of a shipped kernel as the compiler sees it (see the module doc)."""

    kernel: str  # the gate's kernel name (fp8check.registry), or "triton-dgrad"
    phase: str  # fwd | tgmm | dgrad | quantize
    fn: Any  # the @triton.jit function (JITFunction, or InterpretedFunction in interpret mode)
    signature: dict[str, str]
    constexprs: dict[str, Any]
    attrs: dict[str, tuple[tuple[str, Any], ...]]
    num_warps: int
    num_stages: int
    fp8: bool
    claims_tma: bool
    dot_max_num_imprecise_acc: str | None = None
    variant: str = ""  # which launch of the kernel, when it has several (quantizer blocks)

    @property
    def label(self) -> str:
        return f"{self.kernel} ({self.variant})" if self.variant else self.kernel

    def job(self, capability: int = 90) -> CudaJob:
        """This build as a `fp8check.targets.cuda.CudaJob`."""
        return CudaJob(self.label, self.fn, self.signature, self.constexprs, self.attrs,
                         self.num_warps, self.num_stages, capability)


def native_builds(m: int, k: int, n: int, g: int, *,
                  out_dtype: torch.dtype | None = torch.bfloat16,
                  x_dtype: torch.dtype = torch.bfloat16) -> list[TritonBuild]:
    """The launches of every shipped kernel for lhs [m, k], rhs [g, k, n] (K, N multiples
    of 128): the FP8 GEMM (padding-free and padded; the padded one compiles the same kernel
    with the same arguments, only its grid differs), tgmm and dgrad (dX [m, k], dW [g, k, n]),
    and the quantizer on the activations [m, k] (1x128) and on the weights [g, k, n]
    (128x128) from `x_dtype`.  `out_dtype` is the GEMMs' output (None: each wrapper's own
    default, which for tgmm is float32)."""
    if min(m, k, n, g) < 1 or k % QBLOCK or n % QBLOCK:
        raise ValueError(f"native_builds: need m, g >= 1 and K, N positive multiples of "
                         f"{QBLOCK}, got m={m} k={k} n={n} g={g}")

    def t(*shape: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, device="meta")

    def out(wrapper, *shape: int) -> torch.Tensor:
        return t(*shape, dtype=out_dtype or _defaults(wrapper)["out_dtype"])

    fp8, f32, i32 = torch.float8_e4m3fn, torch.float32, torch.int32
    sizes = t(g, dtype=i32)
    kb, nb = k // QBLOCK, triton.cdiv(n, QBLOCK)
    builds = []

    d = _defaults(gmm_fp8)
    launch = gmm_fp8_launch(t(m, k, dtype=fp8), t(m, kb, dtype=f32), t(g, k, n, dtype=fp8),
                            t(g, kb, nb, dtype=f32), sizes, out(gmm_fp8, m, n), d["block_m"],
                            d["block_n"])
    builds.append(_build("triton-fp8", "fwd", _gmm_fp8_kernel, launch, fp8=True,
                         num_warps=NUM_WARPS))

    d = _defaults(gmm_fp8_padded)  # the padded copy of lhs: m_pad rows (data-dependent)
    launch = gmm_fp8_launch(t(m, k, dtype=fp8), t(m, kb, dtype=f32), t(g, k, n, dtype=fp8),
                            t(g, kb, nb, dtype=f32), padded_sizes(sizes, d["block_m"]),
                            out(gmm_fp8_padded, m, n), d["block_m"], d["block_n"])
    builds.append(_build("triton-fp8-padded", "fwd", _gmm_fp8_kernel, launch, fp8=True,
                         num_warps=NUM_WARPS))

    d = _defaults(tgmm)
    launch = tgmm_launch(t(m, k, dtype=torch.bfloat16), t(m, n, dtype=torch.bfloat16), sizes,
                         out(tgmm, g, k, n), d["block_m"], d["block_k"], d["block_n"])
    builds.append(_build("triton-tgmm", "tgmm", _tgmm_kernel, launch, fp8=False))

    d = _defaults(dgrad)
    launch = dgrad_launch(t(m, n, dtype=torch.bfloat16), t(g, k, n, dtype=torch.bfloat16),
                          sizes, out(dgrad, m, k), d["block_m"], d["block_n"], d["block_k"])
    builds.append(_build("triton-dgrad", "dgrad", _dgrad_kernel, launch, fp8=False))

    d = _defaults(quantize_fp8)
    for block, shape in ((d["block"], (m, k)), (BLOCKS[1], (g, k, n))):
        if tuple(block) not in BLOCKS:
            raise AssertionError(f"quantizer block {block} not in {BLOCKS}")
        rows = triton.cdiv(shape[-2], block[0])
        scales = t(*shape[:-2], rows, triton.cdiv(shape[-1], QBLOCK), dtype=f32)
        launch = quantize_launch(t(*shape, dtype=x_dtype), t(*shape, dtype=fp8), scales,
                                 tuple(block), d["recipe"])
        builds.append(_build("triton-quantizer", "quantize", _quantize_kernel, launch,
                             fp8=False,
                             variant=f"{block[0]}x{block[1]} blocks, {_dtype_name(x_dtype)}"))
    return builds


def compile_native_builds(m: int, k: int, n: int, g: int, *, capability: int = 90,
                          **kwargs: Any) -> list[tuple[TritonBuild, CudaBuild]]:
    """`native_builds` compiled for `capability` (one compile process for all)."""
    builds = native_builds(m, k, n, g, **kwargs)
    return list(zip(builds, compile_many(b.job(capability) for b in builds), strict=True))


def hopper_interval(kernel: str) -> int:
    """K elements per tensor-core chain in `kernel`'s FP8 dot as compiled for sm_90a: the
    TTGIR's maxNumImpreciseAcc (layer 0's figure, Triton's AOT compiler, no GPU), capped
    at the kernel's 128-wide block, which it promotes itself.  ValueError when the kernel
    has no native build, does not compile or has no FP8 warp_group_dot."""
    for build, b in compile_native_builds(QBLOCK, QBLOCK, QBLOCK, 1):
        if build.kernel == kernel:
            if not b.ok or b.max_num_imprecise_acc is None:
                raise ValueError(f"{kernel}: no FP8 warp_group_dot in its sm_90a "
                                 f"TTGIR ({b.error or 'compiled'})")
            return min(b.max_num_imprecise_acc, QBLOCK)
    raise ValueError(f"{kernel}: no native build")


# ----------------------------------------------------------------------------- helpers


def _defaults(wrapper) -> dict[str, Any]:
    """The keyword defaults of a public wrapper (its default block sizes, out_dtype...)."""
    return {p.name: p.default for p in inspect.signature(wrapper).parameters.values()
            if p.default is not inspect.Parameter.empty}


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _build(kernel: str, phase: str, fn: Any, launch: tuple, *, fp8: bool,
           variant: str = "", num_warps: int | None = None) -> TritonBuild:
    """`num_warps`: what the wrapper launches with (None: Triton's default)."""
    _, args, constexpr_kwargs = launch
    signature, constexprs, attrs = _specialize(fn, args, constexpr_kwargs)
    options = _launch_options()
    source = _source_tree(fn)
    return TritonBuild(kernel, phase, fn, signature, constexprs, attrs,
                       num_warps or options["num_warps"],
                       options["num_stages"], fp8, _calls(source, "make_tensor_descriptor"),
                       _dot_keyword(source, "max_num_imprecise_acc"), variant)


def _launch_options() -> dict[str, int]:
    """What a launch without num_warps / num_stages gets: Triton's CUDA option defaults."""
    from triton.backends.nvidia.compiler import CUDAOptions

    fields = CUDAOptions.__dataclass_fields__
    return {"num_warps": fields["num_warps"].default, "num_stages": fields["num_stages"].default}


def _kernel_params(fn: Any) -> list:
    """Triton's KernelParam list of `fn`, also when it is an interpreter wrapper."""
    from triton.runtime.jit import KernelParam

    if hasattr(fn, "params"):  # JITFunction
        return fn.params
    kw = getattr(fn, "kwargs", {})  # InterpretedFunction keeps the jit keywords here
    dns, dns_oa = kw.get("do_not_specialize") or (), kw.get("do_not_specialize_on_alignment") or ()
    return [KernelParam(i, p, i in dns or p.name in dns, i in dns_oa or p.name in dns_oa)
            for i, p in enumerate(inspect.signature(fn.fn).parameters.values())]


def _specialize(fn: Any, args: tuple, kwargs: dict) -> tuple[dict, dict, dict]:
    """(signature, constexprs, attrs) of a launch of `fn` on `args`, `kwargs`, computed by
    Triton's own launcher binder for the CUDA backend (as `JITFunction.run` does)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(GPUTarget("cuda", 90, 32))
    raw = getattr(fn, "fn", fn)
    binder = create_function_from_signature(inspect.signature(raw), _kernel_params(fn),
                                            backend)
    bound, specialization, _ = binder(*args, **kwargs)
    signature, constexprs, attrs = {}, {}, {}
    for (name, value), (ty, spec) in zip(bound.items(), specialization, strict=True):
        if not isinstance(ty, str):
            raise NotImplementedError(f"{name}: tuple arguments are not supported")
        signature[name] = ty
        if ty == "constexpr":
            constexprs[name] = spec if spec is not None else value
        elif isinstance(spec, str) and (parsed := backend.parse_attr(spec)):
            attrs[name] = tuple((a, v) for a, v in parsed)
    return signature, constexprs, attrs


def _source_tree(fn: Any) -> ast.AST:
    return ast.parse(textwrap.dedent(inspect.getsource(getattr(fn, "fn", fn))))


def _calls(tree: ast.AST, attr: str) -> bool:
    """True if the source calls ``<anything>.attr(...)``."""
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
               and node.func.attr == attr for node in ast.walk(tree))


def _dot_keyword(tree: ast.AST, keyword: str) -> str | None:
    """Source of `keyword` in the kernel's ``tl.dot`` calls (None if none passes it)."""
    found = [ast.unparse(kw.value) for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and node.func.attr == "dot" for kw in node.keywords if kw.arg == keyword]
    return ", ".join(sorted(set(found))) or None
