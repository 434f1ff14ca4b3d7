"""The chips layer 0 compiles for without having them.

`chips` (every target in one table: how to compile for it, its limits, its FP8 datapath
and accumulator model), and the deviceless toolchains: `tpu` (libtpu's AOT compiler),
`cuda` (Triton's AOT compiler and the ptxas in its wheel), `toolchains` (what both share).
Compiling is not running: these modules say what a compiler produced, not what the
hardware computes.
"""

from fp8check.targets.chips import TARGETS, Target, parse_targets, target  # the earlier names

__all__ = ["TARGETS", "Target", "parse_targets", "target"]
