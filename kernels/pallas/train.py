"""Differentiable grouped matmuls for training, each one `jax.custom_vjp` with the bf16
backward without quantization ("zero backward quantization"): `gmm_fp8_train` (FP8
forward) and `gmm_bf16_train` (bf16 forward, its baseline twin).

FP8 forward: quantize lhs with 1x128 blocks and each expert's rhs with 128x128 blocks
(`quantize_deepgemm`, bit-exact to the reference `deepgemm` recipe), then `gmm_fp8`.
bf16 forward: `gmm_bf16` on bf16 copies of lhs and rhs.
Backward, on the unquantized operands cast to bf16 (the quantizer is treated as the
identity: straight-through):
    d lhs = dgrad(dy, rhs)      d rhs = tgmm(lhs, dy)
so the gradients are those of the dense bf16 function out_g = lhs_g @ rhs_g.  Quantizing
in the backward costs an online quantization of dy (and a transposed one of lhs for tgmm)
at a precision risk, for little gain; the source design found better accuracy and no slowdown
without it.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from fp8check.kernels.pallas.gmm import dgrad, gmm_bf16, gmm_fp8
from fp8check.kernels.pallas.quantize import quantize_deepgemm
from fp8check.kernels.pallas.tgmm import tgmm
from fp8check.kernels.pallas.tiling import Tiling
from fp8check.references.quant import BLOCK

TrainTilings = tuple[Tiling | None, Tiling | None, Tiling | None]  # (fwd, dgrad, tgmm)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _train(lhs, rhs, group_sizes, forward: str, tilings: TrainTilings,
           interpret: bool | None):
    return _forward(lhs, rhs, group_sizes, forward, tilings, interpret)


def _forward(lhs, rhs, group_sizes, forward, tilings, interpret):
    """The forward product: "fp8" (quantize, then `gmm_fp8`) or "bf16" (`gmm_bf16`)."""
    if forward == "fp8":
        lhs_q, lhs_s = quantize_deepgemm(lhs, (1, BLOCK))
        rhs_q, rhs_s = quantize_deepgemm(rhs, (BLOCK, BLOCK))
        return gmm_fp8(lhs_q, lhs_s, rhs_q, rhs_s, group_sizes, tiling=tilings[0],
                       out_dtype=lhs.dtype, interpret=interpret)
    return gmm_bf16(lhs.astype(jnp.bfloat16), rhs.astype(jnp.bfloat16), group_sizes,
                    tiling=tilings[0], out_dtype=lhs.dtype, interpret=interpret)


def _train_fwd(lhs, rhs, group_sizes, forward, tilings, interpret):
    return (_forward(lhs, rhs, group_sizes, forward, tilings, interpret),
            (lhs, rhs, group_sizes))


def _train_bwd(forward, tilings, interpret, residuals, dy):
    lhs, rhs, group_sizes = residuals
    dy16 = dy.astype(jnp.bfloat16)
    d_lhs = dgrad(dy16, rhs.astype(jnp.bfloat16), group_sizes, tiling=tilings[1],
                  out_dtype=lhs.dtype, interpret=interpret)
    d_rhs = tgmm(lhs.astype(jnp.bfloat16), dy16, group_sizes, tiling=tilings[2],
                 out_dtype=rhs.dtype, interpret=interpret)
    return d_lhs, d_rhs, None


_train.defvjp(_train_fwd, _train_bwd)


def _apply(lhs, rhs, group_sizes, forward: str, tilings, interpret) -> jax.Array:
    t = (None, None, None) if tilings is None else tuple(
        None if x is None else Tiling(*x) for x in tilings)
    if len(t) != 3:
        raise ValueError(f"tilings must be (fwd, dgrad, tgmm), got {tilings!r}")
    return _train(jnp.asarray(lhs), jnp.asarray(rhs), jnp.asarray(group_sizes, jnp.int32),
                  forward, t, interpret)


def gmm_fp8_train(lhs, rhs, group_sizes, *, tilings: TrainTilings | None = None,
                  interpret: bool | None = None) -> jax.Array:
    """Differentiable grouped matmul [M, N]: FP8 forward, bf16 backward (module docstring).

    lhs [M, K] and rhs [G, K, N], bf16 or f32 (output and gradients take their dtypes);
    group_sizes [G] int32 (no gradient).  tilings (fwd, dgrad, tgmm), each (tm, tk, tn)
    in the phase's meaning (`tiling` module); default (or None for one phase) the phase
    default, resolved by each kernel at its own shape (shrunk to tiles that divide it).
    """
    return _apply(lhs, rhs, group_sizes, "fp8", tilings, interpret)


def gmm_bf16_train(lhs, rhs, group_sizes, *, tilings: TrainTilings | None = None,
                   interpret: bool | None = None) -> jax.Array:
    """The bf16 twin of `gmm_fp8_train`: forward `gmm_bf16` on bf16 copies of lhs and
    rhs, the same bf16 backward; arguments, dtypes and tilings as there."""
    return _apply(lhs, rhs, group_sizes, "bf16", tilings, interpret)
