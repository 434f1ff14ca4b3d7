"""Pallas TPU FP8 grouped-matmul kernels (interpret mode on CPU).

gmm_fp8 (blockwise FP8 forward with the subchannel loop), gmm_bf16 (baseline), dgrad and
tgmm (bf16 backward), gmm_fp8_train (custom_vjp: FP8 forward, bf16 backward),
quantize_deepgemm (jnp quantizer), check_interpreter (interpret-mode fidelity record).
"""

from fp8check.kernels.pallas.fidelity import InterpreterFidelity, check_interpreter
from fp8check.kernels.pallas.gmm import ACCUM_NATIVE, accum_for, dgrad, gmm_bf16, gmm_fp8
from fp8check.kernels.pallas.quantize import quantize_deepgemm
from fp8check.kernels.pallas.specs import kernel_specs
from fp8check.kernels.pallas.tgmm import tgmm
from fp8check.kernels.pallas.tiling import DEFAULT_TILINGS, TILINGS, Tiling, resolve_tiling
from fp8check.kernels.pallas.train import gmm_fp8_train

__all__ = [
    "ACCUM_NATIVE", "DEFAULT_TILINGS", "TILINGS", "InterpreterFidelity", "Tiling", "accum_for",
    "check_interpreter", "dgrad", "gmm_bf16", "gmm_fp8", "gmm_fp8_train", "kernel_specs",
    "quantize_deepgemm", "resolve_tiling", "tgmm",
]
