"""Bit-exact CPU references: blockwise FP8 quantizer recipes and grouped matmuls.

See `quant` (recipes), `gmm` (forward / weight-gradient / input-gradient matmuls and the
exactness argument), `abs_bound` (|A||B| of FP8 operands), `forward_refs` (a forward
gmm's recipe, exact value and |A||B| in one pass, for the production check), `exact` (the
exact float32 fma and the superaccumulator) and `mma` (bit-accurate models of the FP8
tensor cores: `mma_model(target)`, `mma_block`).
"""

from fp8check.references.gmm import ACCUMS, abs_product, dgrad, gmm, gmm_and_exact, tgmm
from fp8check.references.mma import mma_block, mma_model
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
    "mma_block",
    "mma_model",
    "quantize",
    "tgmm",
]
