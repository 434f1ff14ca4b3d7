"""The validation layers, one module or package each: 0 `native` (every kernel compiled
for real TPU chips and Hopper without hardware), 1 `op` (single ops against the bit-exact
references), 2 `moe` (a family's MoE layer), 3 `training` (FP8 against bf16 training).
Layer 4 (logs of real runs) is the `fp8check curves` command.  The gate dispatches them
through `fp8check.gate.runner.LAYER_BATCHES`; layers never import the gate or the reports.
"""
