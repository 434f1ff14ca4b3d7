"""Validation layers of the gate.  Layer 0 (`native`): every kernel compiled for real
TPU chips and Hopper without hardware.  Layer 1 (`op`): single ops against the bit-exact
references.  Layer 2 (`moe`): each kernel family's MoE layer against the float64 layer.
Layer 3 (`training`): each family's tiny MoE model trained in three precisions.  Layer 4
(end-to-end logs) is the `fp8check curves` command."""

# Layer number -> the module that validates it (imported lazily by the gate: layers 2
# and 3 import a family's MoE layer and model only when that family runs).
LAYERS = {0: "fp8check.layers.native", 1: "fp8check.layers.op", 2: "fp8check.layers.moe",
          3: "fp8check.layers.training"}

__all__ = ["LAYERS"]
