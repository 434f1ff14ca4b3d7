"""Transposed grouped matmul (weight gradient): dW_g = lhs_g^T @ dY_g, contract `tgmm`.

Grid (n tile, k tile, visit); the visit axis walks the row tiles of each group in order
(`metadata.make_group_metadata` with empty groups visited once), so the reduction over a
group's rows is the innermost loop and the [tk, tn] accumulator lives in VMEM until the
group changes.  Rows of other groups in a shared row tile are zeroed in both operands
before the dot, so no row of one group leaks into another (and no NaN from padding or a
neighbour either: 0 * NaN would be NaN, so both operands are masked).  An empty group's
visit computes nothing and stores zeros.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from fp8check.contracts import KernelSpec
from fp8check.kernels.pallas.metadata import GroupMetadata, make_group_metadata, row_mask
from fp8check.kernels.pallas.spec import matmul_spec
from fp8check.kernels.pallas.tiling import Tiling, resolve_tiling
from fp8check.kernels.pallas.validation import (
    check_array,
    check_group_sizes,
    check_out_dtype,
    pad_rows,
    use_interpret,
)


def _tgmm_kernel(offsets, group_ids, m_tile_ids, lhs_ref, dy_ref, out_ref, acc_ref, *,
                 tiling: Tiling):
    tm, tk, tn = tiling
    meta = GroupMetadata(offsets, group_ids, m_tile_ids)
    visit, last = pl.program_id(2), pl.num_programs(2) - 1
    group = group_ids[visit]
    group_starts = (visit == 0) | (group_ids[jnp.maximum(visit - 1, 0)] != group)
    group_ends = (visit == last) | (group_ids[jnp.minimum(visit + 1, last)] != group)

    @pl.when(group_starts)
    def _zero():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(offsets[group + 1] > offsets[group])
    def _accumulate():
        lhs = lhs_ref[...]
        dy = dy_ref[...]
        lhs = jnp.where(row_mask(meta, visit, tm=tm, width=tk), lhs, jnp.zeros_like(lhs))
        dy = jnp.where(row_mask(meta, visit, tm=tm, width=tn), dy, jnp.zeros_like(dy))
        # Contract the row axis of both: lhs^T @ dy without materializing the transpose here.
        acc_ref[...] += lax.dot_general(lhs, dy, (((0,), (0,)), ((), ())),
                                        preferred_element_type=jnp.float32)

    @pl.when(group_ends)
    def _store():
        out_ref[...] = acc_ref[...].astype(out_ref.dtype)


@functools.partial(jax.jit, static_argnames=("num_groups", "tiling", "out_dtype", "interpret"))
def _tgmm(lhs, dy, group_sizes, *, num_groups: int, tiling: Tiling, out_dtype, interpret: bool):
    tm, tk, tn = tiling
    m, k = lhs.shape
    n = dy.shape[1]
    meta, num_visits = make_group_metadata(group_sizes, m=m, tm=tm, visit_empty_groups=True)
    call = pl.pallas_call(
        functools.partial(_tgmm_kernel, tiling=tiling),
        out_shape=jax.ShapeDtypeStruct((num_groups, k, n), out_dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=3,
            in_specs=[
                pl.BlockSpec((tm, tk), lambda n_i, k_i, v, o, g, t: (t[v], k_i)),
                pl.BlockSpec((tm, tn), lambda n_i, k_i, v, o, g, t: (t[v], n_i)),
            ],
            out_specs=pl.BlockSpec((None, tk, tn), lambda n_i, k_i, v, o, g, t: (g[v], k_i, n_i)),
            grid=(n // tn, k // tk, num_visits),
            scratch_shapes=[pltpu.VMEM((tk, tn), jnp.float32)],
        ),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
        interpret=interpret,
    )
    return call(*meta, lhs, dy)


def tgmm(lhs, dy, group_sizes, *, tiling: tuple[int, int, int] | None = None,
         out_dtype=jnp.float32, interpret: bool | None = None) -> jax.Array:
    """dW [G, K, N] with dW_g = lhs_g^T @ dY_g over the rows of group g; contract `tgmm`.

    lhs [M, K] bf16, dy [M, N] bf16, group_sizes [G] int32 (sum <= M; rows past the sum are
    ignored).  f32 accumulation over row tiles in order, rounded once to out_dtype (f32 or
    bf16).  An empty group gives zeros.  tiling (tm, tk, tn): tm tiles the reduction over
    rows, (tk, tn) the output; default `tiling.DEFAULT_TILINGS["tgmm"]`, clamped.
    """
    lhs = check_array("lhs", lhs, 2, (jnp.bfloat16,))
    dy = check_array("dy", dy, 2, (jnp.bfloat16,))
    m, k = lhs.shape
    if dy.shape[0] != m:
        raise ValueError(f"lhs has {m} rows but dy has {dy.shape[0]}")
    if m == 0:
        raise ValueError("need M >= 1 rows")
    num_groups = int(jnp.shape(group_sizes)[0]) if jnp.ndim(group_sizes) == 1 else -1
    if num_groups < 1:
        raise ValueError(f"group_sizes must be 1-D with G >= 1, got shape {jnp.shape(group_sizes)}")
    gs = check_group_sizes(group_sizes, num_groups, m)
    out_dtype = check_out_dtype(out_dtype)
    t = resolve_tiling("tgmm", tiling, m=m, k=k, n=dy.shape[1], in_dtype=lhs.dtype,
                       out_dtype=out_dtype)
    m_pad = -(-m // t.tm) * t.tm
    return _tgmm(pad_rows(lhs, m_pad), pad_rows(dy, m_pad), gs, num_groups=num_groups,
                 tiling=t, out_dtype=out_dtype, interpret=use_interpret(interpret))


def tgmm_spec(backend: str) -> KernelSpec:
    """KernelSpec of `tgmm` ("pallas-tgmm") at its default tiling on `backend` ("auto",
    "interpret" or "native")."""
    return matmul_spec("pallas-tgmm", "tgmm", tgmm, backend,
                       "bf16 weight-gradient grouped matmul, default tiling")
