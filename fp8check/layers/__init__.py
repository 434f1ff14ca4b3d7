"""Validation layers of the gate.  Layer 0 (`native`): every kernel compiled for real
TPU chips and Hopper without hardware.  Layer 1 (`op`): single ops against the bit-exact
references.  Layers 2-4 (MoE layer, training, end-to-end logs) are separate modules."""

# Layer number -> the module that validates it (imported lazily by the gate: layers 2
# and 3 pull in the MoE layers of both kernel families).  Layer 4 (logs of real runs) is
# the `fp8check curves` command.
LAYERS = {0: "fp8check.layers.native", 1: "fp8check.layers.op", 2: "fp8check.layers.moe",
          3: "fp8check.layers.training"}

__all__ = ["LAYERS"]
