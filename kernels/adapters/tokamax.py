"""tokamax's FP8 ragged dot (Mosaic-TPU Pallas kernel) as a `gmm-fp8` gate kernel.

Wraps `tokamax._src.ops.ragged_dot.pallas_mosaic_tpu_kernel.gmm` (tokamax 0.0.12), the
kernel `PallasMosaicTpuRaggedDot` runs for the forward ragged dot.  The op class itself
refuses every non-TPU device (`supported_on`: platform "tpu", generation >= 5), so the
adapter calls the kernel function with the arguments the op's `_fwd` passes for
already-quantized operands: its default `Config` tiling (128, 128, 128), two input
buffers, `out_dtype` = the requested output dtype, default precision.

Operands.  tokamax takes quantized operands as `qwix.QArray(qvalue, scale)`, the scale
being the dequantization multiplier with one entry per block (`scale.shape` divides
`qvalue.shape`).  Along the reduction axis K any block of >= 8 (sublanes) elements works;
along a non-reduction axis only one scale per element or one for the whole axis
(`mosaic_tpu.quant_block_spec`, "Limitation 1").  So:

* lhs: QArray(lhs_q [M, K] e4m3fn, lhs_scale [M, K/128]): the contract's 1x128 layout as
  it is.
* rhs: QArray(rhs_q [G, K, N] e4m3fn, [G, K/128, N]): the contract's 128x128 block scale
  repeated over the block's 128 columns (exact: the same float32 value per column).
  tokamax cannot take 128x128 rhs scales directly.

M must be a multiple of the row tile: lhs is padded with zero rows (scale 1) to the next
multiple of 128 and the result cut back; the padding lies past sum(group_sizes), where
the contract compares nothing.

Accumulation (`accum`).  Per 128-wide K block the kernel takes the f32 dot P, scales it
by the lhs then the rhs scale, and adds it to the f32 accumulator (`_scale_out_by_scale`
twice, then `acc_scratch[...] += out`): acc = RN(RN(RN(P*sa)*sb) + acc), the reference
recipe "tokamax".  That holds where each operation rounds on its own: on the TPU (its VPU
has no fused multiply-add, `fp8check.targets.tpu`) and in interpret mode with the
``xla-cpu-no-fma`` fidelity fix (`fp8check.jaxenv`).  Without that fix XLA:CPU may fuse
the last multiply and add, so no recipe is declared (only the bound is gated).

Interpret mode off a TPU.  tokamax sizes its scale blocks from the chip's sublane and
lane counts (`pltpu.get_tpu_info()`), which jax knows only for TPU device kinds; the
adapter registers the v5e's figures (8 sublanes, 128 lanes, the same on v6e and v5p) for
this machine's device kind in jax's `tpu_info.registry`, the table jax consults for
device kinds it does not know.
"""

from __future__ import annotations

import functools

from fp8check import jaxenv
from fp8check.contracts import OUT_DTYPES, KernelSpec, MatmulClaims
from fp8check.kernels.pallas.spec import resolve_backend
from fp8check.references.quant import BLOCK

TILING = (128, 128, 128)  # tokamax's default Config (tile_m, tile_k, tile_n)
INPUT_BUFFER_COUNT = 2  # tokamax's default Config
QBLOCK = BLOCK  # the contract's quantization block edge


def _register_chip_for_interpret() -> None:
    """Give jax's TPU table the v5e's figures for this (non-TPU) device kind (module
    docstring); a no-op when the device kind is a TPU's or already registered."""
    import jax
    from jax._src.pallas.mosaic import tpu_info

    kind = jax.devices()[0].device_kind
    if tpu_info.chip_version_from_device_kind(kind) is None and kind not in tpu_info.registry:
        tpu_info.registry[kind] = functools.partial(
            tpu_info.get_tpu_info_for_chip, tpu_info.ChipVersion.TPU_V5E, 1)


def tokamax_fp8(backend: str = "auto") -> KernelSpec:
    """KernelSpec "tokamax-fp8": tokamax's Mosaic-TPU ragged dot on the contract's FP8
    operands (module docstring), f32 or bf16 output."""
    import jax
    import jax.numpy as jnp
    import qwix
    from tokamax._src.ops.ragged_dot import pallas_mosaic_tpu_kernel

    from fp8check.kernels.pallas.fidelity import probe_fidelity

    resolved = resolve_backend(backend)
    interpret = resolved == "interpret"
    if interpret:
        _register_chip_for_interpret()
    tm = TILING[0]

    def gmm(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype=jnp.float32,
            interpret=interpret):
        m = lhs_q.shape[0]
        pad = -m % tm
        if pad:
            lhs_q = jnp.pad(lhs_q, ((0, pad), (0, 0)))
            lhs_scale = jnp.pad(lhs_scale, ((0, pad), (0, 0)), constant_values=1.0)
        lhs = qwix.QArray(lhs_q, lhs_scale)
        rhs = qwix.QArray(rhs_q, jnp.repeat(rhs_scale, QBLOCK, axis=2))
        out = pallas_mosaic_tpu_kernel.gmm(
            lhs, rhs, group_sizes.astype(jnp.int32), precision=jax.lax.Precision.DEFAULT,
            out_dtype=out_dtype, tiling=TILING, input_buffer_count=INPUT_BUFFER_COUNT,
            interpret=interpret)
        return out[:m]

    recipe_holds = not interpret or jaxenv.no_fma_requested()
    return KernelSpec(
        name="tokamax-fp8", contract="gmm-fp8", framework="jax", fn=gmm,
        native_fn=functools.partial(gmm, interpret=False),
        claims=MatmulClaims(accum="tokamax" if recipe_holds else None, out_dtypes=OUT_DTYPES),
        backend=resolved,
        fidelity_fixes=tuple(probe_fidelity().fixes) if interpret else (),
        description="tokamax 0.0.12 Mosaic-TPU ragged dot (third-party, FP8 QArray operands)",
    )
