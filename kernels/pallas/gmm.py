"""Forward grouped matmul kernels: `gmm_fp8` (blockwise FP8), `gmm_bf16` (baseline), `dgrad`.

All three run one Pallas kernel body over the grid (n tile, visit, k tile); a visit is one
(row tile, group) pair from `metadata.make_group_metadata`, so a row tile that straddles
groups is computed once per group and each visit stores only its own group's rows.  The
output is aliased to an initial buffer (zeros by default): rows that no group owns, i.e.
rows at or past sum(group_sizes), keep its values, and no uninitialized memory escapes.

FP8 accumulation recipe: the K tile holds tk/128 quantization blocks
("subchannels").  For each, the kernel takes the f32 dot P of the 128-wide slice, then
    acc = RN(RN(RN(P * sa) * sb) + acc)          (reference accum "tokamax")
with sa the lhs scale of (row, K block) and sb the rhs scale of (K block, N block), in K
order.  This equals the reference bit for bit when each P is exact in f32 (it is whenever
the 128 products sum exactly, e.g. small-integer FP8 values); otherwise the f32 dot's own
summation order is the MXU's (or XLA's), and only `bound_ratio` <= 1 is promised.
On TPU the VPU multiplies and adds separately: the Mosaic LLO of this kernel, compiled
for v5e, v6e and v5p (`fp8check.targets.tpu`, gate layer 0), has `vmul.f32` and
`vadd.f32` and no fused multiply-add, so `ACCUM_NATIVE` is "tokamax"; the MXU takes the
e4m3 operands as `e4m3b_to_bf16` (converted to bf16 on the way in, exact for every e4m3
value) and returns f32.  Interpret mode runs on XLA:CPU, which would contract
`acc + t * sb` into an FMA in some grid structures and not in others; `fp8check.jaxenv`
turns FMA off for XLA:CPU (fidelity fix `xla-cpu-no-fma`), and `accum_for(interpret)`
asks `fidelity.interpreter_accum()`, which runs this kernel in interpret mode on two grid
structures and names the recipe both match bit for bit (None if they differ: then only
the bound applies).

Scale layout inside the kernel: the scales are regrouped per K tile at the boundary
(lhs [K/tk, M, nsub], rhs [G, K/tk, nsub, N] with one rhs scale per output lane) so each
grid step's block covers whole minor dimensions and the subchannel picks its scale with a
static slice of a loaded value.  Indexing a [tm, K/128] block with a dynamic `pl.ds`
along lanes instead does not compile for any TPU (Mosaic E2003:
unproven 128-alignment of the lane index).  The contract's layout (`gmm_fp8`'s
arguments) is unchanged.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from fp8check.contracts import KernelSpec
from fp8check.kernels.pallas.fidelity import interpreter_accum
from fp8check.kernels.pallas.metadata import GroupMetadata, make_group_metadata, row_mask
from fp8check.kernels.pallas.spec import matmul_spec
from fp8check.kernels.pallas.tiling import LANES, Tiling, resolve_tiling
from fp8check.kernels.pallas.validation import (
    check_array,
    check_group_sizes,
    check_out_dtype,
    pad_rows,
    use_interpret,
)

ACCUM_NATIVE = "tokamax"  # gmm_fp8's accumulation recipe compiled for TPU (module docstring)

FP8 = ml_dtypes.float8_e4m3fn
BF16 = jnp.bfloat16


def accumulate_scaled(acc: jax.Array, p: jax.Array, sa: jax.Array, sb: jax.Array) -> jax.Array:
    """One K block's accumulation step, acc + (p * sa) * sb, in this evaluation order.

    Written as `tokamax`; whether the compiler keeps the final multiply and add apart
    decides the recipe actually computed (module docstring).
    """
    return acc + (p * sa) * sb


def accum_for(interpret: bool | None = None) -> str | None:
    """The reference `accum` recipe gmm_fp8 computes in this mode (None: no recipe pinned)."""
    if not use_interpret(interpret):
        return ACCUM_NATIVE
    return interpreter_accum()


def _gmm_kernel(offsets, group_ids, m_tile_ids, *refs, tiling: Tiling, scaled: bool,
                transpose_rhs: bool, out_dtype):
    if scaled:
        lhs_ref, rhs_ref, lhs_scale_ref, rhs_scale_ref, init_ref, out_ref, acc_ref = refs
    else:
        lhs_ref, rhs_ref, init_ref, out_ref, acc_ref = refs
    tm, tk, tn = tiling
    meta = GroupMetadata(offsets, group_ids, m_tile_ids)
    visit, k_i = pl.program_id(1), pl.program_id(2)

    @pl.when(k_i == 0)
    def _zero():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    if scaled:
        # The subchannel loop: unrolled, one 128-deep MXU matmul per quantization block.
        # The K tile's scales arrive as whole blocks ([tm, nsub] and [nsub, tn]); the
        # subchannel picks its column / row with a static slice of the loaded value.  A
        # ref load at a lane offset that is not a multiple of 128 does not compile on TPU.
        lhs_scales = lhs_scale_ref[...]
        rhs_scales = rhs_scale_ref[...]
        for s in range(tiling.num_subchannels):
            cols = slice(s * LANES, (s + 1) * LANES)
            p = lax.dot(lhs_ref[:, cols], rhs_ref[cols, :], preferred_element_type=jnp.float32)
            sa = lhs_scales[:, s:s + 1]  # [tm, 1]
            sb = rhs_scales[s:s + 1, :]  # [1, tn]
            acc_ref[...] = accumulate_scaled(acc_ref[...], p, sa, sb)
    else:
        contract = (((1,), (1,)), ((), ())) if transpose_rhs else (((1,), (0,)), ((), ()))
        acc_ref[...] += lax.dot_general(lhs_ref[...], rhs_ref[...], contract,
                                        preferred_element_type=jnp.float32)

    @pl.when(k_i == pl.num_programs(2) - 1)
    def _store():
        prev = jnp.maximum(visit - 1, 0)
        first_visit_of_tile = (visit == 0) | (m_tile_ids[visit] != m_tile_ids[prev])
        base = jnp.where(first_visit_of_tile, init_ref[...], out_ref[...])
        mask = row_mask(meta, visit, tm=tm, width=tn)
        out_ref[...] = jnp.where(mask, acc_ref[...].astype(out_dtype), base)


@functools.partial(jax.jit, static_argnames=("tiling", "transpose_rhs", "interpret"))
def _grouped_matmul(lhs, rhs, group_sizes, lhs_scale, rhs_scale, init_out, *,
                    tiling: Tiling, transpose_rhs: bool, interpret: bool):
    """out[M_pad, n] on padded operands; see `grouped_matmul` for the contract."""
    tm, tk, tn = tiling
    m, k = lhs.shape
    n = rhs.shape[1] if transpose_rhs else rhs.shape[2]
    scaled = lhs_scale is not None
    meta, num_visits = make_group_metadata(group_sizes, m=m, tm=tm, visit_empty_groups=False)

    def lhs_map(n_i, v, k_i, offsets, gids, tiles):
        return tiles[v], k_i

    def rhs_map(n_i, v, k_i, offsets, gids, tiles):
        return (gids[v], n_i, k_i) if transpose_rhs else (gids[v], k_i, n_i)

    def out_map(n_i, v, k_i, offsets, gids, tiles):
        return tiles[v], n_i

    rhs_block = (None, tn, tk) if transpose_rhs else (None, tk, tn)
    in_specs = [pl.BlockSpec((tm, tk), lhs_map), pl.BlockSpec(rhs_block, rhs_map)]
    operands = [lhs, rhs]
    if scaled:
        # Scales regrouped by K tile, so each grid step gets exactly its K tile's
        # subchannels as a block whose minor dims are whole array dims (TPU's (8, 128)
        # block rule holds for any num_subchannels): lhs [K/tk, M, nsub], rhs
        # [G, K/tk, nsub, N].  A copy of 1/32 of lhs's bytes, made outside the kernel.
        nsub, k_tiles = tiling.num_subchannels, k // tk
        lhs_scale = lhs_scale.reshape(m, k_tiles, nsub).transpose(1, 0, 2)
        rhs_scale = rhs_scale.reshape(rhs_scale.shape[0], k_tiles, nsub, n)
        in_specs += [
            pl.BlockSpec((None, tm, nsub), lambda n_i, v, k_i, o, g, t: (k_i, t[v], 0)),
            pl.BlockSpec((None, None, nsub, tn),
                         lambda n_i, v, k_i, o, g, t: (g[v], k_i, 0, n_i)),
        ]
        operands += [lhs_scale, rhs_scale]
    in_specs.append(pl.BlockSpec((tm, tn), out_map))
    operands.append(init_out)
    kernel = functools.partial(_gmm_kernel, tiling=tiling, scaled=scaled,
                               transpose_rhs=transpose_rhs, out_dtype=init_out.dtype)
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), init_out.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=3,
            in_specs=in_specs,
            out_specs=pl.BlockSpec((tm, tn), out_map),
            grid=(n // tn, num_visits, k // tk),
            scratch_shapes=[pltpu.VMEM((tm, tn), jnp.float32)],
        ),
        # Operand index counts the 3 scalar-prefetch arrays; init_out is the last operand.
        input_output_aliases={3 + len(operands) - 1: 0},
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary", "arbitrary")),
        interpret=interpret,
    )
    return call(*meta, *operands)


def grouped_matmul(lhs, rhs, group_sizes, *, lhs_scale=None, rhs_scale=None, phase: str,
                   tiling, out_dtype, transpose_rhs: bool, interpret: bool | None,
                   init_out=None) -> jax.Array:
    """Shared driver of gmm_fp8 / gmm_bf16 / dgrad (arguments already dtype-checked).

    lhs [M, k]; rhs [G, k, n] ([G, n, k] with transpose_rhs); scales as in `gmm_fp8` or
    None.  Rows of group g are the next group_sizes[g] rows of lhs; the output [M, n] holds
    lhs_g @ rhs_g on those rows and `init_out` (zeros when None) on every other row.
    """
    m, k = lhs.shape
    num_groups = rhs.shape[0]
    n = rhs.shape[1] if transpose_rhs else rhs.shape[2]
    if (rhs.shape[2] if transpose_rhs else rhs.shape[1]) != k:
        raise ValueError(f"lhs is [M={m}, K={k}] but rhs is {tuple(rhs.shape)}: K differs")
    if m == 0 or num_groups == 0:
        raise ValueError(f"need M >= 1 and G >= 1, got M={m}, G={num_groups}")
    out_dtype = check_out_dtype(out_dtype)
    gs = check_group_sizes(group_sizes, num_groups, m)
    t = resolve_tiling(phase, tiling, m=m, k=k, n=n, in_dtype=lhs.dtype, out_dtype=out_dtype)
    if init_out is None:
        init_out = jnp.zeros((m, n), out_dtype)
    else:
        init_out = check_array("init_out", init_out, 2, (out_dtype,))
        if init_out.shape != (m, n):
            raise ValueError(f"init_out must have shape {(m, n)}, got {tuple(init_out.shape)}")
    m_pad = -(-m // t.tm) * t.tm
    if lhs_scale is not None:
        lhs_scale = pad_rows(lhs_scale, m_pad)
    out = _grouped_matmul(pad_rows(lhs, m_pad), rhs, gs, lhs_scale, rhs_scale,
                          pad_rows(init_out, m_pad), tiling=t, transpose_rhs=transpose_rhs,
                          interpret=use_interpret(interpret))
    return out[:m]


def gmm_fp8(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, *,
            tiling: tuple[int, int, int] | None = None, out_dtype=jnp.bfloat16,
            interpret: bool | None = None, init_out=None) -> jax.Array:
    """Blockwise-FP8 grouped matmul, contract `gmm-fp8`; accumulation recipe `accum_for(interpret)`
    (`tokamax` on TPU; `cublas` in interpret mode on XLA:CPU, which fuses the last mul-add).

    lhs_q [M, K] e4m3fn with lhs_scale [M, K/128] f32 (1x128 blocks); rhs_q [G, K, N]
    e4m3fn with rhs_scale [G, K/128, N/128] f32 (128x128 blocks per expert); scales are
    dequantization multipliers.  group_sizes [G] int32, sum <= M.  Returns [M, N] of
    out_dtype (bf16 or f32): out[r] = dequant(lhs)[r] @ dequant(rhs[g]) for row r of group
    g, computed as the module docstring states; rows at or past sum(group_sizes) are zero
    (or `init_out`'s).  tiling (tm, tk, tn), tk = 128 x num_subchannels; default
    `tiling.DEFAULT_TILINGS["fwd"]`, clamped to the problem.  interpret=None: native on
    TPU, interpret mode elsewhere.  numpy or jax arrays in, jax array out.
    """
    lhs_q = check_array("lhs_q", lhs_q, 2, (FP8,))
    rhs_q = check_array("rhs_q", rhs_q, 3, (FP8,))
    m, k = lhs_q.shape
    num_groups, _, n = rhs_q.shape
    if k % LANES or n % LANES:
        raise ValueError(f"gmm_fp8 needs K and N multiples of {LANES}, got K={k}, N={n}")
    lhs_scale = check_array("lhs_scale", lhs_scale, 2, (np.float32,))
    rhs_scale = check_array("rhs_scale", rhs_scale, 3, (np.float32,))
    if lhs_scale.shape != (m, k // LANES):
        raise ValueError(f"lhs_scale must be {(m, k // LANES)}, got {tuple(lhs_scale.shape)}")
    if rhs_scale.shape != (num_groups, k // LANES, n // LANES):
        raise ValueError(f"rhs_scale must be {(num_groups, k // LANES, n // LANES)}, "
                         f"got {tuple(rhs_scale.shape)}")
    # One scale per output lane: the kernel multiplies a [1, tn] row without a lane gather.
    rhs_scale_lanes = jnp.repeat(rhs_scale, LANES, axis=2)
    return grouped_matmul(lhs_q, rhs_q, group_sizes, lhs_scale=lhs_scale,
                          rhs_scale=rhs_scale_lanes, phase="fwd", tiling=tiling,
                          out_dtype=out_dtype, transpose_rhs=False, interpret=interpret,
                          init_out=init_out)


def gmm_bf16(lhs, rhs, group_sizes, *, tiling: tuple[int, int, int] | None = None,
             out_dtype=jnp.bfloat16, interpret: bool | None = None,
             init_out=None) -> jax.Array:
    """Baseline bf16 grouped matmul, contract `gmm`: out[r] = lhs[r] @ rhs[g] for row r of
    group g, one f32 dot per K tile accumulated in f32 and rounded once to out_dtype.

    lhs [M, K] bf16, rhs [G, K, N] bf16, group_sizes [G] int32 (sum <= M).  Rows at or past
    sum(group_sizes) are zero (or `init_out`'s).  Tiling and interpret as in `gmm_fp8`.
    """
    lhs = check_array("lhs", lhs, 2, (BF16,))
    rhs = check_array("rhs", rhs, 3, (BF16,))
    return grouped_matmul(lhs, rhs, group_sizes, phase="fwd", tiling=tiling,
                          out_dtype=out_dtype, transpose_rhs=False, interpret=interpret,
                          init_out=init_out)


def dgrad(dy, rhs, group_sizes, *, tiling: tuple[int, int, int] | None = None,
          out_dtype=jnp.bfloat16, interpret: bool | None = None) -> jax.Array:
    """Input gradient dX[M, K] = dY_g @ W_g^T per group, in bf16 (no quantization).

    dy [M, N] bf16, rhs (= W) [G, K, N] bf16, group_sizes [G] int32.  Rows at or past
    sum(group_sizes) are zero.  tiling (tm, tk, tn): tk tiles the contracted N, tn the
    output K (default `tiling.DEFAULT_TILINGS["dgrad"]`).
    """
    dy = check_array("dy", dy, 2, (BF16,))
    rhs = check_array("rhs", rhs, 3, (BF16,))
    return grouped_matmul(dy, rhs, group_sizes, phase="dgrad", tiling=tiling,
                          out_dtype=out_dtype, transpose_rhs=True, interpret=interpret)


def fp8_spec(backend: str) -> KernelSpec:
    """KernelSpec of `gmm_fp8` ("pallas-fp8") at its default tiling on `backend` ("auto",
    "interpret" or "native"), declaring the recipe it computes there (`accum_for`)."""
    spec = matmul_spec("pallas-fp8", "gmm-fp8", gmm_fp8, backend,
                       "blockwise FP8 grouped matmul, default tiling")
    return replace(spec, claims=replace(spec.matmul_claims,
                                        accum=accum_for(spec.backend == "interpret")))


def bf16_spec(backend: str) -> KernelSpec:
    """KernelSpec of `gmm_bf16` ("pallas-bf16") at its default tiling on `backend`."""
    return matmul_spec("pallas-bf16", "gmm", gmm_bf16, backend,
                       "bf16 grouped matmul, default tiling")
