"""Self-test of Pallas interpret mode on this machine, against ml_dtypes and exact arithmetic.

Interpret mode runs the kernel body through XLA:CPU, which is not the TPU.  Before the
gate trusts interpret-mode results it records, from probes run inside `pallas_call` in
interpret mode (the same path the kernels take):

* ``fp8_upcast_exact``: every one of the 256 e4m3fn codes enters `lax.dot` as its exact
  value (NaN codes as NaN), checked through one-hot dots.
* ``fp8_dot_f32_accumulate``: an fp8 x fp8 dot with f32 output accumulates in f32, not in a
  narrower type: small-integer rows whose exact sums need up to 15 bits come out exact.
* ``bf16_dot_f32_accumulate``: the same for bf16 x bf16 (the baseline, dgrad and tgmm).
* ``f32_to_bf16_rne``: the kernel's f32 -> bf16 output cast rounds to nearest even, as the
  TPU does, including ties, overflow to inf, subnormals and NaN.
* ``accum``: which reference accumulation recipe `gmm_fp8` itself computes here, measured
  by running the kernel on exact-partial data: "tokamax" if the scale step's multiply and
  add round separately, "cublas" if XLA contracts them into an FMA (it did while the kernel
  indexed its scales with `pl.ds`; since the scales come as per-K-tile blocks it does
  not), None if no recipe matches bit for bit.

One fix is active by default, ``xla-cpu-no-fma`` (`fp8check.jaxenv`): without it XLA:CPU
fuses the scale step into an FMA in some grids and not in others, and `accum` is None (no
recipe pinned, only the bound is gated).  With it interpret mode computes ``tokamax``,
which is what the TPU's LLO shows (`gmm.ACCUM_NATIVE`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax.experimental import pallas as pl

from fp8check import jaxenv
from fp8check.kernels.pallas.tiling import LANES


@dataclass(frozen=True)
class FidelityRecord:
    """Outcome of `probe_fidelity`: each check's pass flag, the measured accumulation
    recipe, and the interpret-mode fixes that are active (module docstring)."""

    checks: dict[str, bool]
    accum: str | None
    fixes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return all(self.checks.values())

    def to_dict(self) -> dict:
        return {"checks": dict(self.checks), "accum": self.accum, "fixes": list(self.fixes),
                "ok": self.ok}


def _interpret_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    def kernel(a_ref, b_ref, o_ref):
        o_ref[...] = jax.lax.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    out = jax.ShapeDtypeStruct((a.shape[0], b.shape[1]), jnp.float32)
    return np.asarray(pl.pallas_call(kernel, out_shape=out, interpret=True)(a, b))


def _same(out: np.ndarray, want: np.ndarray) -> bool:
    """Bitwise-equal values, NaN matching NaN."""
    out, want = np.asarray(out, np.float64), np.asarray(want, np.float64)
    return bool(np.all((out == want) | (np.isnan(out) & np.isnan(want))))


def _check_fp8_upcast() -> bool:
    codes = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
    a = np.zeros((256, LANES), ml_dtypes.float8_e4m3fn)
    a[:, 0] = codes
    b = np.zeros((LANES, LANES), ml_dtypes.float8_e4m3fn)
    b[0, :] = 1.0
    return _same(_interpret_dot(a, b)[:, 0], codes.astype(np.float64))


def _check_dot_accumulates_f32(dtype, rng: np.random.Generator) -> bool:
    # Integers in [-16, 16] are exact in e4m3fn and bf16; 128 products of at most 256 sum
    # to below 2^15 in any order, exact in f32 but not in bf16 (8 significant bits).
    a = rng.integers(-16, 17, (64, LANES)).astype(np.float32)
    b = rng.integers(-16, 17, (LANES, LANES)).astype(np.float32)
    out = _interpret_dot(a.astype(dtype), b.astype(dtype))
    return _same(out, a.astype(np.float64) @ b.astype(np.float64))


def _check_bf16_rounding(rng: np.random.Generator) -> bool:
    bf16_grid = rng.standard_normal(4096).astype(ml_dtypes.bfloat16).astype(np.float32)
    bits = bf16_grid.view(np.uint32)
    ties = (bits + np.uint32(0x8000)).view(np.float32)  # exactly halfway to the next bf16
    near = (bits + np.uint32(0x7FFF)).view(np.float32)  # just below halfway
    above = (bits + np.uint32(0x8001)).view(np.float32)  # just above halfway
    special = np.array([np.finfo(np.float32).max, -np.finfo(np.float32).max, 3.4e38, 1e-40,
                        -1e-42, 0.0, -0.0, np.inf, -np.inf, np.nan], np.float32)
    x = np.concatenate([ties, near, above, special]).astype(np.float32)
    x = np.resize(x, (x.size // LANES + 1) * LANES).reshape(-1, LANES)

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...].astype(jnp.bfloat16)

    out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.bfloat16),
                         interpret=True)(x)
    return _same(np.asarray(out).astype(np.float32), x.astype(ml_dtypes.bfloat16))


def _measure_accum(rng: np.random.Generator) -> str | None:
    """The recipe gmm_fp8 itself computes here, or None if it depends on the grid.

    The kernel runs (interpret mode) on problems whose 128-wide partials are exact in f32
    (values in [-4, 4]: |P| <= 2048) with non-power-of-two scales that separate the
    recipes, once as a one-program grid (one K tile of four subchannels) and once as a
    2 x 1 x 2 grid (two N tiles, two K tiles of two).  Probing the real kernel on both
    matters: whether XLA:CPU contracts the scale step into an FMA depends on how the
    kernel body fuses, not on the step alone (`fp8check.jaxenv`)."""
    from fp8check.kernels.pallas.gmm import gmm_fp8  # gmm imports us
    from fp8check.references.gmm import gmm
    from fp8check.references.quant import BLOCK, QTensor

    def measured(m: int, k: int, n: int, tiling: tuple[int, int, int]) -> set[str]:
        fp8 = ml_dtypes.float8_e4m3fn
        lhs = QTensor(rng.integers(-4, 5, (m, k)).astype(np.float32).astype(fp8),
                      rng.uniform(0.01, 3.0, (m, k // BLOCK)).astype(np.float32), (1, BLOCK),
                      "e4m3fn", "deepgemm")
        rhs = QTensor(rng.integers(-4, 5, (1, k, n)).astype(np.float32).astype(fp8),
                      rng.uniform(0.01, 3.0, (1, k // BLOCK, n // BLOCK)).astype(np.float32),
                      (BLOCK, BLOCK), "e4m3fn", "deepgemm")
        gs = np.array([m], np.int32)
        out = np.asarray(gmm_fp8(lhs.values, lhs.scales, rhs.values, rhs.scales, gs,
                                 tiling=tiling, out_dtype=jnp.float32, interpret=True))
        return {r for r in ("tokamax", "cublas", "deepgemm")
                if _same(out, gmm(lhs, rhs, gs, out_dtype=np.float32, accum=r))}

    both = measured(64, 512, 128, (64, 512, 128)) & measured(64, 512, 256, (64, 256, 128))
    return both.pop() if len(both) == 1 else None


@functools.cache
def probe_fidelity(seed: int = 0) -> FidelityRecord:
    """Run every probe once (cached per process) and return the record for the gate."""
    rng = np.random.default_rng(seed)
    checks = {
        "fp8_upcast_exact": _check_fp8_upcast(),
        "fp8_dot_f32_accumulate": _check_dot_accumulates_f32(ml_dtypes.float8_e4m3fn, rng),
        "bf16_dot_f32_accumulate": _check_dot_accumulates_f32(ml_dtypes.bfloat16, rng),
        "f32_to_bf16_rne": _check_bf16_rounding(rng),
    }
    accum = _measure_accum(rng)
    checks["accum_recipe_pinned"] = accum is not None
    fixes = ("xla-cpu-no-fma",) if jaxenv.no_fma_requested() else ()
    return FidelityRecord(checks=checks, accum=accum, fixes=fixes)


def interpreter_accum() -> str | None:
    """The accumulation recipe gmm_fp8 computes in interpret mode on this machine."""
    return probe_fidelity().accum
