"""Validation layers of the gate.  Layer 1 (`op`): single ops against the bit-exact
references.  Layers 2-4 (MoE layer, training, end-to-end logs) are separate modules."""

# Layer number -> the module that validates it (imported lazily by the gate: layer 2
# pulls in the MoE layers of both kernel families).
LAYERS = {1: "fp8check.layers.op", 2: "fp8check.layers.moe"}

__all__ = ["LAYERS"]
