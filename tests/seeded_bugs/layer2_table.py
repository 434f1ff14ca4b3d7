"""What both families' layer-2 seeded bugs share: the table of bugs built from a family's
pieces, which of them FP8 noise hides, and the `layer_impl` that runs a family's MoE layer
with one grouped matmul swapped in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Bugs whose error hides inside FP8 quantization noise: only the straight-through
# correctness criteria can see them (the impact criteria pass).
HIDDEN_BY_QUANTIZATION = ("quantized-residuals",)


def bug_table(buggy: Callable[..., Any], dgrad_ok, dgrad_transposed, tgmm_ok, tgmm_leak,
              tgmm_rolled) -> tuple[dict[str, Any], Any]:
    """(BUGS, CORRECT): `buggy(dgrad_fn, tgmm_fn, quantized_residuals=...)` builds a
    differentiable grouped matmul with that backward; CORRECT is the right wiring, which
    must pass or the bugs prove nothing."""
    bugs = {
        "tgmm-boundary-leak": buggy(dgrad_ok, tgmm_leak),
        "dgrad-transposed": buggy(dgrad_transposed, tgmm_ok),
        "dw-expert-rolled": buggy(dgrad_ok, tgmm_rolled),
        "quantized-residuals": buggy(dgrad_ok, tgmm_ok, quantized_residuals=True),
    }
    return bugs, buggy(dgrad_ok, tgmm_ok)


def layer_running(run_moe: Callable[[Any, Any], Any], gmm: Any) -> Callable[[Any, str], Any]:
    """A `layer_impl` for `run_layer2`: the family's `run_moe` with `gmm` for every variant."""

    def layer(inp, variant: str):
        return run_moe(inp, gmm)

    return layer
