"""Validation layers of the gate.  Layer 1 (`op`): single ops against the bit-exact
references.  Layers 2-4 (MoE layer, training, end-to-end logs) are separate modules."""

from fp8check.layers import op

# Layer number -> (layer name in results, module validating one (kernel, case)).
LAYERS = {1: op}

__all__ = ["LAYERS", "op"]
