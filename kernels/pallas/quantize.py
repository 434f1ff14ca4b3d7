"""jnp blockwise quantizer, bit-exact to the reference `deepgemm` recipe (jit-able).

Per block: amax = max |x| (float32, after an exact upcast from bf16), s = RN_f32(max(amax,
1e-4) / 448) (the dequantization multiplier), q = satfinite_e4m3fn(x * RN_f32(1 / s)):
clamp to +-448 in float32, then one RNE cast.  Every step is one IEEE float32 operation,
so XLA computes the same bits as numpy (given the guard against XLA's rewrites of the two
divisions, below).  A partial last block (R or C not a multiple of the block) covers its
valid elements only: the array is padded with zeros, which leave every block's amax as it
is (|0| <= amax), and the padding's values are dropped.  NaN or Inf runs through the
recipe's arithmetic as the reference's nan="propagate" does, never raised (a traced value
cannot raise).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from fp8check.contracts import KernelSpec, QuantizerClaims
from fp8check.references.quant import BLOCK

E4M3_MAX = 448.0
AMAX_FLOOR = np.float32(1e-4)  # float32(1e-4), as the reference's guard


def quantize_deepgemm(x, block: tuple[int, int]) -> tuple[jax.Array, jax.Array]:
    """(values e4m3fn of x's shape, scales f32 [..., ceil(R/bR), ceil(C/bC)]) of x
    [..., R, C] (f32/bf16).

    Raises ValueError for other dtypes, rank < 2, or a block size below 1.
    """
    x = jnp.asarray(x)
    if x.dtype not in (jnp.float32, jnp.bfloat16):
        raise ValueError(f"quantize_deepgemm: x must be float32 or bfloat16, got {x.dtype}")
    if x.ndim < 2:
        raise ValueError(f"quantize_deepgemm: x must be at least 2-D, got shape {x.shape}")
    br, bc = block
    *lead, r, c = x.shape
    if br < 1 or bc < 1:
        raise ValueError(f"quantize_deepgemm: block {block} must be positive")
    rp, cp = -(-r // br) * br, -(-c // bc) * bc
    x32 = jnp.pad(x.astype(jnp.float32), [(0, 0)] * len(lead) + [(0, rp - r), (0, cp - c)])
    blocks = x32.reshape(*lead, rp // br, br, cp // bc, bc)
    amax = jnp.max(jnp.abs(blocks), axis=(-3, -1))
    # XLA's max reduction does not carry NaN reliably (on XLA:CPU a NaN inside a 1x128
    # block can give the finite max of the others), while the recipe's max is NaN for a
    # block holding one: say so explicitly.
    amax = jnp.where(jnp.isnan(blocks).any(axis=(-3, -1)), jnp.float32(jnp.nan), amax)
    # XLA's algebraic simplifier rewrites x / 448 into x * RN(1/448) and 1 / (a / 448) into
    # 448 / a, neither of which is the recipe (scales and values one ulp off;
    # optimization_barrier does not stop it).  It cannot fold 0 * amax (that is NaN for an
    # infinite amax), so `hide` makes a constant opaque, and the divisions stay true IEEE
    # divisions.  The opaque zero is 0 * min(amax, 1): zero for every finite or infinite
    # amax, NaN for a NaN block (as the reference).  Not 0 * amax: that is NaN for an
    # infinite amax too, giving an Inf block a NaN scale and all-NaN values where the
    # reference has an infinite scale, zero values and NaN only at the infinities
    # (x * RN(1/inf) = x * 0).
    opaque_zero = jnp.float32(0) * jnp.minimum(amax, jnp.float32(1))

    def hide(c):
        return jnp.float32(c) + opaque_zero

    scale = jnp.maximum(amax, AMAX_FLOOR) / hide(E4M3_MAX)
    inv = hide(1) / (scale + opaque_zero)
    scaled = blocks * inv[..., :, None, :, None]
    q = jnp.clip(scaled, -E4M3_MAX, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn)
    return q.reshape(x32.shape)[..., :r, :c], scale


def quantizer_spec(backend: str) -> KernelSpec:
    """KernelSpec of `quantize_deepgemm` with 1x128 blocks ("pallas-quantizer"); plain
    jnp, it runs on jax's default device whatever `backend` says."""
    return KernelSpec(
        name="pallas-quantizer", contract="quantizer", framework="jax",
        fn=functools.partial(quantize_deepgemm, block=(1, BLOCK)),
        claims=QuantizerClaims("deepgemm", block=(1, BLOCK)), backend=jax.default_backend(),
    )
