"""Bit-exact CPU references: blockwise FP8 quantizer recipes and grouped matmuls.

See `quant` (recipes), `gmm` (forward / weight-gradient / input-gradient matmuls and the
exactness argument) and `exact` (the exact float32 fma and the superaccumulator).
"""

from fp8check.references.gmm import ACCUMS, abs_product, dgrad, gmm, gmm_and_exact, tgmm
from fp8check.references.quant import BLOCK, RECIPES, QTensor, dequantize, quantize

__all__ = [
    "ACCUMS",
    "BLOCK",
    "RECIPES",
    "QTensor",
    "abs_product",
    "dequantize",
    "dgrad",
    "gmm",
    "gmm_and_exact",
    "quantize",
    "tgmm",
]
