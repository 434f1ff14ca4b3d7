"""The Pallas kernels as native builds: what gate layer 0 compiles for each TPU chip.

One `PallasBuild` per (kernel, phase, tiling) at a problem shape: the function the
compiler gets (the same public entry points the interpret-mode gate calls, with
`interpret=False`, so both views judge one kernel body) and its arguments as
(shape, dtype) pairs.  Output dtypes are the training ones: bf16 forward and dgrad
outputs, f32 weight gradients (`fp8check.tune.space.PHASE_DTYPES`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from fp8check.kernels.pallas.gmm import dgrad, gmm_bf16, gmm_fp8
from fp8check.kernels.pallas.quantize import quantize_deepgemm
from fp8check.kernels.pallas.tgmm import tgmm
from fp8check.kernels.pallas.tiling import LANES, TILINGS, Tiling, resolve_tiling
from fp8check.kernels.pallas.train import gmm_fp8_train

FP8 = np.dtype(ml_dtypes.float8_e4m3fn)
BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
I32 = np.dtype(np.int32)
Args = list[tuple[tuple[int, ...], np.dtype]]


@dataclass(frozen=True)
class PallasBuild:
    """One kernel to compile: `fn(*args)` with args given as (shape, dtype)."""

    kernel: str  # the built-in kernel name (fp8check.registry), or the phase's entry point
    phase: str  # fwd | dgrad | tgmm | train | quantize
    # FP8 operands into the MXU (no upcast to bf16 on the VPU first): "all" its matmuls,
    # "any" (the training step: an FP8 forward beside bf16 backward kernels), or None.
    fp8_feed: str | None
    tiling: Tiling | None
    fn: Callable
    args: Args
    mosaic: bool = True  # a Pallas kernel (False: plain jnp, no Mosaic kernel to inspect)

    @property
    def label(self) -> str:
        if self.tiling is None:
            return self.phase
        return f"{self.phase}-{'x'.join(map(str, self.tiling))}"


def offered_tilings(phase: str, m: int, k: int, n: int, in_dtype, out_dtype) -> list[Tiling]:
    """The phase default and every production tiling, each resolved at (m, k, n) as the
    kernel would resolve it (duplicates dropped), in that order."""
    out: list[Tiling] = [resolve_tiling(phase, None, m=m, k=k, n=n, in_dtype=in_dtype,
                                        out_dtype=out_dtype)]
    for per_phase in TILINGS.values():
        t = per_phase[phase]
        try:
            t = resolve_tiling(phase, (min(t.tm, out[0].tm), min(t.tk, k), min(t.tn, n)),
                               m=m, k=k, n=n, in_dtype=in_dtype, out_dtype=out_dtype)
        except ValueError:  # a production tiling that does not divide this toy shape
            continue
        if t not in out:
            out.append(t)
    return out


def _train_step(lhs, rhs, group_sizes):
    """sum(gmm_fp8_train(...)) and its gradients in (lhs, rhs): the FP8 forward and both
    bf16 backward kernels in one program, as training runs them.  The loss value is
    returned so XLA keeps the forward (the bf16 backward does not need its output)."""
    def loss(a, b):
        return gmm_fp8_train(a, b, group_sizes, interpret=False).astype(jnp.float32).sum()

    return jax.value_and_grad(loss, argnums=(0, 1))(lhs, rhs)


def native_builds(m: int, k: int, n: int, g: int) -> list[PallasBuild]:
    """Every Pallas kernel of the family at a wi-style problem (lhs [m, k], rhs [g, k, n]):
    gmm_fp8 at each offered tiling, gmm_bf16, dgrad, tgmm, the training step, and the
    quantizer.  Raises ValueError when k or n is not a multiple of 128."""
    if k % LANES or n % LANES:
        raise ValueError(f"native builds need K and N multiples of {LANES}, got K={k}, N={n}")
    fp8_args: Args = [((m, k), FP8), ((m, k // LANES), F32), ((g, k, n), FP8),
                      ((g, k // LANES, n // LANES), F32), ((g,), I32)]
    builds = [
        PallasBuild("pallas-fp8", "fwd", "all", t,
                    functools.partial(gmm_fp8, tiling=t, out_dtype=jnp.bfloat16,
                                      interpret=False), fp8_args)
        for t in offered_tilings("fwd", m, k, n, FP8, BF16)
    ]
    builds += [
        PallasBuild("pallas-bf16", "fwd", None, None,
                    functools.partial(gmm_bf16, out_dtype=jnp.bfloat16, interpret=False),
                    [((m, k), BF16), ((g, k, n), BF16), ((g,), I32)]),
        PallasBuild("pallas-dgrad", "dgrad", None, None,
                    functools.partial(dgrad, out_dtype=jnp.bfloat16, interpret=False),
                    [((m, n), BF16), ((g, k, n), BF16), ((g,), I32)]),
        PallasBuild("pallas-tgmm", "tgmm", None, None,
                    functools.partial(tgmm, out_dtype=jnp.float32, interpret=False),
                    [((m, k), BF16), ((m, n), BF16), ((g,), I32)]),
        PallasBuild("pallas-fp8-train", "train", "any", None, _train_step,
                    [((m, k), BF16), ((g, k, n), BF16), ((g,), I32)]),
        PallasBuild("pallas-quantizer", "quantize", None, None,
                    functools.partial(quantize_deepgemm, block=(1, LANES)), [((m, k), BF16)],
                    mosaic=False),
    ]
    return builds
