"""Measured fitness: kernel wall time compiled on a TPU, at the shape being tuned.

Only where the Pallas kernels run natively (jax's default backend is a TPU).  Interpret
mode times the Python interpreter of the kernel, not the kernel, so it is never used as
fitness: elsewhere `measure_us` raises and the search uses `cost_model` instead.
Untested here: this project's machines have no TPU.
"""

from __future__ import annotations

import time

import numpy as np

from fp8check.kernels.pallas.tiling import Tiling
from fp8check.references.quant import BLOCK
from fp8check.tune.cost_model import balanced_group_sizes
from fp8check.tune.shapes import GmmShape

MEASURED_LABEL = "measured"
WARMUP, REPEATS = 2, 10


def native_available() -> bool:
    """Whether the Pallas kernels compile here (a TPU backend)."""
    import jax

    return jax.default_backend() == "tpu"


def require_native() -> None:
    """Raise ValueError (one line) unless the kernels can be timed here."""
    if not native_available():
        raise ValueError("measured fitness needs a TPU (the Pallas kernels run in interpret "
                         "mode here, and interpret-mode time is not kernel time); use "
                         "--fitness model")


def _phase_call(phase: str, tiling: Tiling, shape: GmmShape):
    """A zero-argument callable running `phase` once on random production-shaped inputs."""
    import jax
    import jax.numpy as jnp

    from fp8check.kernels.pallas import dgrad, gmm_fp8, tgmm

    m, k, n, g = shape
    gs = jnp.asarray(balanced_group_sizes(m, g), jnp.int32)
    keys = jax.random.split(jax.random.key(0), 2)
    if phase == "fwd":
        lhs = jax.random.normal(keys[0], (m, k), jnp.float32).astype(jnp.float8_e4m3fn)
        rhs = jax.random.normal(keys[1], (g, k, n), jnp.float32).astype(jnp.float8_e4m3fn)
        ls = jnp.ones((m, k // BLOCK), jnp.float32)
        rs = jnp.ones((g, k // BLOCK, n // BLOCK), jnp.float32)
        return lambda: gmm_fp8(lhs, ls, rhs, rs, gs, tiling=tiling, interpret=False)
    w = jax.random.normal(keys[1], (g, k, n), jnp.bfloat16)
    if phase == "dgrad":
        dy = jax.random.normal(keys[0], (m, n), jnp.bfloat16)
        return lambda: dgrad(dy, w, gs, tiling=tiling, interpret=False)
    x = jax.random.normal(keys[0], (m, k), jnp.bfloat16)
    dy = jax.random.normal(keys[1], (m, n), jnp.bfloat16)
    return lambda: tgmm(x, dy, gs, tiling=tiling, interpret=False)


def measure_us(phase: str, tiling: Tiling, shape: GmmShape) -> float:
    """Median wall time in microseconds of `REPEATS` runs after `WARMUP` (compile) runs.

    Raises ValueError when the kernels cannot run natively here."""
    require_native()
    run = _phase_call(phase, tiling, shape)
    for _ in range(WARMUP):
        run().block_until_ready()
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        run().block_until_ready()
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1e6)
