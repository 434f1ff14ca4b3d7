"""jax's megablox grouped matmul as a `gmm` (bf16) kernel: the bring-your-own example.

Wraps `jax.experimental.pallas.ops.tpu.megablox.gmm.gmm` (a TPU Pallas kernel; on a CPU it
runs in Pallas interpret mode).  megablox needs M to be a multiple of its row tile tm, so
the adapter pads lhs with zero rows to the next multiple of 128 and drops them again: the
padding lies past sum(group_sizes), where the contract compares nothing.  tiling
(128, 128, 128) fits every K and N that the contract allows (multiples of 128).
"""

from __future__ import annotations

import functools
import importlib

from fp8check.contracts import KernelSpec, MatmulClaims

TILING = (128, 128, 128)
_MODULE = "jax.experimental.pallas.ops.tpu.megablox.gmm"


def _on_tpu() -> bool:
    import jax

    return any(d.platform == "tpu" for d in jax.devices())


def _resolve_backend(backend: str) -> str:
    if backend == "auto":
        return "native" if _on_tpu() else "interpret"
    if backend == "native" and not _on_tpu():
        raise ValueError("megablox-bf16: --backend native needs a TPU; use interpret")
    if backend not in ("interpret", "native"):
        raise ValueError(f"megablox-bf16: unknown backend {backend!r}")
    return backend


def megablox_bf16(backend: str = "auto") -> KernelSpec:
    """KernelSpec of megablox gmm on bf16 operands, f32 or bf16 output."""
    import jax.numpy as jnp

    # `from ... import gmm` would give the function that shadows the module's name.
    megablox = importlib.import_module(_MODULE)
    resolved = _resolve_backend(backend)
    tm = TILING[0]

    def gmm(lhs, rhs, group_sizes, out_dtype=jnp.float32, interpret=resolved == "interpret"):
        m = lhs.shape[0]
        pad = -m % tm
        if pad:
            lhs = jnp.pad(lhs, ((0, pad), (0, 0)))
        out = megablox.gmm(lhs, rhs, group_sizes, preferred_element_type=out_dtype,
                           tiling=TILING, interpret=interpret)
        return out[:m]

    return KernelSpec(
        name="megablox-bf16", contract="gmm", framework="jax", fn=gmm,
        native_fn=functools.partial(gmm, interpret=False),
        claims=MatmulClaims(out_dtypes=("f32", "bf16")), backend=resolved,
        description="jax megablox gmm (third-party, bf16 operands, f32 accumulation)",
    )
