"""Pallas TPU FP8 grouped-matmul kernels (interpret mode on CPU).

gmm_fp8 (blockwise FP8 forward with the subchannel loop), gmm_bf16 (baseline), dgrad and
tgmm (bf16 backward), gmm_fp8_train and gmm_bf16_train (custom_vjp: FP8 or bf16 forward,
bf16 backward), quantize_deepgemm (jnp quantizer), probe_fidelity (interpret-mode
fidelity record).  Each gate kernel's KernelSpec factory sits beside it (`gmm.fp8_spec`,
`gmm.bf16_spec`, `tgmm.tgmm_spec`, `quantize.quantizer_spec`).
"""

from fp8check.kernels.pallas.fidelity import FidelityRecord, probe_fidelity
from fp8check.kernels.pallas.gmm import ACCUM_NATIVE, accum_for, dgrad, gmm_bf16, gmm_fp8
from fp8check.kernels.pallas.quantize import quantize_deepgemm
from fp8check.kernels.pallas.tgmm import tgmm
from fp8check.kernels.pallas.tiling import DEFAULT_TILINGS, TILINGS, Tiling, resolve_tiling
from fp8check.kernels.pallas.train import gmm_bf16_train, gmm_fp8_train

__all__ = [
    "ACCUM_NATIVE", "DEFAULT_TILINGS", "TILINGS", "FidelityRecord", "Tiling", "accum_for",
    "dgrad", "gmm_bf16", "gmm_bf16_train", "gmm_fp8", "gmm_fp8_train", "probe_fidelity",
    "quantize_deepgemm", "resolve_tiling", "tgmm",
]
