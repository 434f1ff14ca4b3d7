"""Layer 2 (MoE layer): each kernel family's MoE layer against the float64 reference
layer (`validate`).  `pallas` and `triton` are the families' MoE layers under test, each
with `run_variant(inputs, "fp8" | "bf16")`."""

from fp8check.layers.moe.validate import (
    LAYER,
    SUITES,
    TENSORS,
    VARIANTS,
    LayerImpl,
    MoeCase,
    iter_layer2,
    layer2_size,
    make_inputs,
    run_layer2,
    validate_moe_case,
)

__all__ = ["LAYER", "SUITES", "TENSORS", "VARIANTS", "LayerImpl", "MoeCase", "iter_layer2",
           "layer2_size", "make_inputs", "run_layer2", "validate_moe_case"]
