"""What the Triton kernels' KernelSpec factories share (each kernel module defines its
own: `gmm.fp8_spec`, `gmm.fp8_hopper_spec`, `padding.fp8_padded_spec`,
`backward.tgmm_spec`, `quantize.quantizer_spec`).

accum: the accumulation recipe an FP8 GEMM computes bit-exactly *under the interpreter*
(with `interpret`'s exact partial dot active).  Compiled for sm_90 the FP8 GEMM's partial
is the tensor core's: the spec declares accum "deepgemm-hopper" with the promotion
interval read from the kernel's own compiled TTGIR (`native.hopper_interval`), and the
interpreter reproduces it under `interpret.dot_model("hopper")` (the "hopper" dot).
m_align is 1 for every kernel: the padded baseline pads internally and takes any M_g;
every kernel is deterministic (fixed K order, no atomics or split-K).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from fp8check.contracts import OUT_DTYPES, KernelSpec

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


def triton_spec(name: str, contract: str, fn: Callable, backend: str, *,
                description: str, accum: str | None = None, recipe: str | None = None,
                dot: str = "exact", build: str | None = None) -> KernelSpec:
    """The KernelSpec of Triton kernel `fn` on `backend` ("auto" or the mode this process
    runs Triton in: TRITON_INTERPRET is read when triton is first imported).

    Quantizers declare `recipe` with 1x128 blocks; GEMMs declare both output dtypes and
    `accum` in interpret mode with the exact partial dot.  An FP8 GEMM compiled, or
    interpreted with `dot="hopper"`, declares "deepgemm-hopper" instead: compiled with the
    promotion interval of its native build `build` (default `name`), interpreted with
    the 128-wide block's.  The interpreter's fidelity fixes are recorded."""
    resolved = "interpret" if interpret_mode() else "native"
    if backend != "auto" and backend != resolved:
        raise ValueError(f"Triton runs {resolved} in this process (TRITON_INTERPRET is read "
                         "when triton is first imported)")
    fixes = tuple(probe_fidelity().fixes)
    extra: dict[str, Any]
    if contract == "quantizer":
        extra = {"recipe": recipe, "block": (1, 128)}
    elif resolved == "native" or dot == "hopper":
        if resolved == "native":
            from .native import hopper_interval

            interval = hopper_interval(build or name)
        else:
            interval = QBLOCK  # the dot never promotes; the kernel does, every block
            fn, fixes = _with_dot_model(fn, "hopper"), fixes + ("dot_hopper_mma",)
        extra = {"out_dtypes": OUT_DTYPES, "accum": "deepgemm-hopper",
                 "hopper_interval": interval}
    else:
        extra = {"out_dtypes": OUT_DTYPES, "accum": accum}
    return KernelSpec(name=name, contract=contract, framework="torch", fn=fn, m_align=1,
                      deterministic=True, backend=resolved, fidelity_fixes=fixes,
                      description=description, **extra)
