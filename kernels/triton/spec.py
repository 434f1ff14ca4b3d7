"""What the Triton kernels' KernelSpec factories share (each kernel module defines its
own: `gmm.fp8_spec`, `gmm.fp8_hopper_spec`, `gmm.fp8_blackwell_spec`,
`padding.fp8_padded_spec`, `backward.tgmm_spec`, `quantize.quantizer_spec`).

accum: the accumulation recipe an FP8 GEMM computes bit-exactly *under the interpreter*
(with `interpret`'s exact partial dot active).  Compiled, the FP8 GEMM's partial is the
tensor core's (`TENSOR_CORE_RECIPES`): on sm_90 the spec declares accum
"deepgemm-hopper" with the promotion interval read from the kernel's own compiled TTGIR
(`native.hopper_interval`); on sm_100 "deepgemm-blackwell" (Triton's sm_100 dot has no
promotion interval: the kernel promotes every 128-wide block).  The interpreter
reproduces either under `interpret.dot_model("hopper" | "blackwell")`.
m_align is 1 for every kernel: the padded baseline pads internally and takes any M_g;
every kernel is deterministic (fixed K order, no atomics or split-K).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from fp8check.contracts import (
    OUT_DTYPES,
    Claims,
    KernelSpec,
    MatmulClaims,
    QuantizerClaims,
    contract_of,
)

from ._common import QBLOCK
from .fidelity import probe_fidelity
from .interpret import dot_model, interpret_mode


def _with_dot_model(fn: Callable, model: str) -> Callable:
    """`fn` run with the interpreter's fp8 tl.dot following `model`."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with dot_model(model):
            return fn(*args, **kwargs)

    return run


# The interpreter's dot model -> the recipe of the tensor core it models.
TENSOR_CORE_RECIPES = {"hopper": "deepgemm-hopper", "blackwell": "deepgemm-blackwell"}


def _native_dot() -> str:
    """The tensor-core dot model of the GPU this process compiles for: "hopper" on compute
    capability 9.x, "blackwell" on 10.x; ValueError on any other GPU (no model)."""
    import torch

    major = torch.cuda.get_device_capability()[0]
    dots = {9: "hopper", 10: "blackwell"}
    if major not in dots:
        raise ValueError(f"no FP8 tensor-core model for compute capability {major}.x "
                         "(fp8check models sm_90 and sm_100)")
    return dots[major]


def triton_spec(name: str, contract: str, fn: Callable, backend: str, *,
                description: str, accum: str | None = None, recipe: str | None = None,
                dot: str = "exact", build: str | None = None) -> KernelSpec:
    """The KernelSpec of Triton kernel `fn` on `backend` ("auto" or the mode this process
    runs Triton in: TRITON_INTERPRET is read when triton is first imported).

    Quantizers declare `recipe` with 1x128 blocks; GEMMs declare both output dtypes and
    `accum` in interpret mode with the exact partial dot.  An FP8 GEMM compiled, or
    interpreted with `dot="hopper"` or `"blackwell"`, declares that tensor core's recipe
    instead (`TENSOR_CORE_RECIPES`; compiled: the GPU's own): Hopper with the promotion
    interval of its native build `build` (default `name`) when compiled, the 128-wide
    block's when interpreted.  The interpreter's fidelity fixes are recorded."""
    resolved = "interpret" if interpret_mode() else "native"
    if backend != "auto" and backend != resolved:
        raise ValueError(f"Triton runs {resolved} in this process (TRITON_INTERPRET is read "
                         "when triton is first imported)")
    fixes = tuple(probe_fidelity().fixes)
    claims: Claims
    if not contract_of(contract).matmul:
        if recipe is None:
            raise ValueError(f"Triton quantizer {name!r}: pass its recipe")
        claims = QuantizerClaims(recipe, block=(1, QBLOCK), deterministic=True)
    elif resolved == "native" or dot in TENSOR_CORE_RECIPES:
        interval = QBLOCK  # the dot never promotes; the kernel does, every block
        if resolved == "native":
            dot = _native_dot()
            if dot == "hopper":
                from .native import hopper_interval

                interval = hopper_interval(build or name)
        else:
            fn, fixes = _with_dot_model(fn, dot), fixes + (f"dot_{dot}_mma",)
        claims = MatmulClaims(accum=TENSOR_CORE_RECIPES[dot], hopper_interval=interval,
                              out_dtypes=OUT_DTYPES, m_align=1, deterministic=True)
    else:
        claims = MatmulClaims(accum=accum, out_dtypes=OUT_DTYPES, m_align=1,
                              deterministic=True)
    return KernelSpec(name=name, contract=contract, framework="torch", fn=fn, claims=claims,
                      backend=resolved, fidelity_fixes=fixes, description=description)
