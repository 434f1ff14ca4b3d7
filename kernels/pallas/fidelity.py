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
* ``accum``: which reference accumulation recipe the kernel's scale step
  (`gmm.accumulate_scaled`) computes here: "tokamax" if the multiply and add round
  separately, "cublas" if XLA fuses them into an FMA (it does on XLA:CPU today), None if
  neither matches bit for bit.

No interpreter fault needs a workaround today (`fixes` is empty); the FMA contraction is
not a fault but a different recipe, and gmm_fp8 declares it through `gmm.accum_for`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax.experimental import pallas as pl

from fp8check.kernels.pallas.gmm import accumulate_scaled
from fp8check.references.exact import fma_f32


@dataclass(frozen=True)
class InterpreterFidelity:
    """Outcome of `check_interpreter`: each check's pass flag, the measured accumulation
    recipe, and the interpret-mode fixes that are active (with why)."""

    checks: dict[str, bool]
    accum: str | None
    fixes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return all(self.checks.values())

    def as_dict(self) -> dict:
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
    a = np.zeros((256, 128), ml_dtypes.float8_e4m3fn)
    a[:, 0] = codes
    b = np.zeros((128, 128), ml_dtypes.float8_e4m3fn)
    b[0, :] = 1.0
    return _same(_interpret_dot(a, b)[:, 0], codes.astype(np.float64))


def _check_dot_accumulates_f32(dtype, rng: np.random.Generator) -> bool:
    # Integers in [-16, 16] are exact in e4m3fn and bf16; 128 products of at most 256 sum
    # to below 2^15 in any order, exact in f32 but not in bf16 (8 significant bits).
    a = rng.integers(-16, 17, (64, 128)).astype(np.float32)
    b = rng.integers(-16, 17, (128, 128)).astype(np.float32)
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
    x = np.resize(x, (x.size // 128 + 1) * 128).reshape(-1, 128)

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...].astype(jnp.bfloat16)

    out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.bfloat16),
                         interpret=True)(x)
    return _same(np.asarray(out).astype(np.float32), x.astype(ml_dtypes.bfloat16))


def _measure_accum(rng: np.random.Generator) -> str | None:
    shape = (256, 128)
    p, sa, sb, acc = (rng.standard_normal(shape).astype(np.float32) for _ in range(4))

    def kernel(acc_ref, p_ref, sa_ref, sb_ref, o_ref):
        o_ref[...] = accumulate_scaled(acc_ref[...], p_ref[...], sa_ref[...], sb_ref[...])

    out = np.asarray(pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(shape, jnp.float32),
                                    interpret=True)(acc, p, sa, sb))
    t = p * sa  # RN(P * sa): float32 numpy rounds each operation once
    if _same(out, (t * sb) + acc):
        return "tokamax"
    if _same(out, fma_f32(t, sb, acc)):
        return "cublas"
    return None


@functools.cache
def check_interpreter(seed: int = 0) -> InterpreterFidelity:
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
    return InterpreterFidelity(checks=checks, accum=accum)


def interpreter_accum() -> str | None:
    """The accumulation recipe gmm_fp8 computes in interpret mode on this machine."""
    return check_interpreter().accum
