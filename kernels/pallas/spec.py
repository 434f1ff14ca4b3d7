"""What the Pallas kernels' KernelSpec factories share: the backend they run on and the
interpreter's fidelity record.  Each kernel module defines its own factory
(`gmm.fp8_spec`, `gmm.bf16_spec`, `tgmm.tgmm_spec`, `quantize.quantizer_spec`)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from fp8check.contracts import OUT_DTYPES, KernelSpec, MatmulClaims
from fp8check.kernels.pallas.fidelity import probe_fidelity
from fp8check.kernels.pallas.validation import use_interpret


def resolve_backend(backend: str) -> str:
    """"interpret" or "native" for the gate's `backend` ("auto": native on a TPU,
    interpret elsewhere).  ValueError for "native" without a TPU."""
    interpret = None if backend == "auto" else backend == "interpret"
    resolved = "interpret" if use_interpret(interpret) else "native"
    if backend == "native" and resolved != "native":
        raise ValueError("--backend native needs a TPU")
    return resolved


def matmul_spec(name: str, contract: str, fn: Callable, backend: str,
                description: str) -> KernelSpec:
    """The KernelSpec of a Pallas matmul kernel `fn` (it takes the contract's arguments
    plus `tiling=` and `interpret=`) at its default tiling on `backend`: both output
    dtypes, any group size, deterministic, and the interpreter's fidelity fixes when it
    runs in interpret mode.  `accum` is left None (no recipe pinned)."""
    resolved = resolve_backend(backend)
    interpret = resolved == "interpret"
    return KernelSpec(
        name=name, contract=contract, framework="jax",
        fn=functools.partial(fn, interpret=interpret),
        claims=MatmulClaims(out_dtypes=OUT_DTYPES, m_align=1, deterministic=True),
        backend=resolved,
        fidelity_fixes=tuple(probe_fidelity().fixes) if interpret else (),
        description=description,
    )
