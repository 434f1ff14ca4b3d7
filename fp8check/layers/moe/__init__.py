"""Layer 2 (MoE layer): a MoE layer against the float64 reference layer (`validate`).

The layer is written once per framework (`jax_layer`, `torch_layer`) around the experts'
grouped matmuls, `ExpertMatmuls` (`matmuls`): a kernel family's, or a user's kernels
(`user`: `UserKernels` -> `user_matmuls`, with the framework pieces in `jax_grouped` and
`torch_grouped`)."""

from fp8check.contracts import LAYER_CONTRACTS
from fp8check.layers.moe.matmuls import VARIANTS, ExpertMatmuls, family_matmuls
from fp8check.layers.moe.user import UserKernels, tested_variant, user_matmuls
from fp8check.layers.moe.validate import (
    LAYER,
    SUITES,
    TENSORS,
    LayerImpl,
    MoeCase,
    iter_layer2,
    layer2_size,
    make_inputs,
    run_layer2,
    validate_moe_case,
)

__all__ = ["LAYER", "LAYER_CONTRACTS", "SUITES", "TENSORS", "VARIANTS", "ExpertMatmuls",
           "LayerImpl", "MoeCase", "UserKernels", "family_matmuls", "iter_layer2",
           "layer2_size", "make_inputs", "run_layer2", "tested_variant", "user_matmuls",
           "validate_moe_case"]
