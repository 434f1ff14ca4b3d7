"""What layers 2 and 3 run as the experts' grouped matmuls: `ExpertMatmuls`, one per kernel
family (`family_matmuls`) or built around a user's kernels (`fp8check.layers.moe.user`).

The MoE layer (`jax_layer`, `torch_layer`) and the training model
(`fp8check.layers.training.jax_model`, `torch_model`) are written once per framework around
a differentiable grouped matmul; a family or a user's kernels only supply that matmul, one
per variant:

* "fp8": FP8 forward (both operands quantized with the `deepgemm` recipe, 1x128 blocks for
  the activation, 128x128 per expert for the weight), bf16 backward;
* "bf16": bf16 forward and backward.

The straight-through references of layer 2 (`fp8check.references.moe`) are exactly these
two functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fp8check import registry
from fp8check.references.moe import MoEInputs, MoEOutputs

VARIANTS = ("fp8", "bf16")
LAYER_FRAMEWORKS = ("jax", "torch")
FAMILY_FRAMEWORKS = {"pallas": "jax", "triton": "torch"}  # the framework of each family


@dataclass(frozen=True)
class ExpertMatmuls:
    """The expert grouped matmuls of one layer under test.

    name: the results' kernel prefix (`<name>-moe-fp8`, `<name>-train-fp8`): a family
        name or the user's forward kernel.
    framework: "jax" or "torch", the framework of the layer and the model built around them.
    variants: variant ("fp8", "bf16") -> differentiable grouped matmul in `framework`,
        (x [M, K], w [G, K, N], group_sizes [G] int32) -> [M, N] bf16.
    tested: the variants that run the kernels under test, whose results are reported; any
        other variant is a baseline (the bf16 run a user's FP8 training is compared with).
    notes: string metrics every result carries (what fp8check built around the kernels,
        e.g. whose backward ran).
    """

    name: str
    framework: str
    variants: Mapping[str, Callable[..., Any]]
    tested: tuple[str, ...] = VARIANTS
    notes: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.framework not in LAYER_FRAMEWORKS:
            raise ValueError(f"{self.name}: layers 2 and 3 are built in "
                             f"{' or '.join(LAYER_FRAMEWORKS)}, not {self.framework!r}")
        if not self.tested or not set(self.tested) <= set(self.variants) <= set(VARIANTS):
            raise ValueError(f"{self.name}: variants {sorted(self.variants)} and tested "
                             f"{self.tested} must be subsets of {VARIANTS}, tested non-empty")

    def variant(self, name: str) -> Callable[..., Any]:
        """The differentiable grouped matmul of variant `name`; ValueError naming the
        choices otherwise."""
        if name not in self.variants:
            raise ValueError(f"variant must be one of {tuple(self.variants)}, got {name!r}")
        return self.variants[name]

    def run_layer(self, inp: MoEInputs, variant: str) -> MoEOutputs:
        """The MoE layer of `variant` on `inp`, forward and gradients (a `LayerImpl`)."""
        gmm = self.variant(variant)
        if self.framework == "jax":
            from fp8check.layers.moe.jax_layer import run_moe
        else:
            from fp8check.layers.moe.torch_layer import run_moe  # type: ignore[assignment]
        return run_moe(inp, gmm)


def family_matmuls(family: str) -> ExpertMatmuls:
    """The expert matmuls of a kernel family, imported only now (importing the Triton family
    sets its interpreter up): Pallas's `gmm_fp8_train` / `gmm_bf16_train` (JAX), Triton's
    `grouped_linear_fp8` / `grouped_linear_bf16` (torch; its bf16 forward is the `dgrad`
    kernel on the transposed weight, dgrad(x, W^T)_g = x_g @ W_g, as there is no bf16 forward
    Triton kernel).  ValueError for an unknown family."""
    registry.check_family(family)
    if family == "pallas":
        from fp8check.kernels.pallas.train import gmm_bf16_train, gmm_fp8_train

        return ExpertMatmuls(family, FAMILY_FRAMEWORKS[family],
                             {"fp8": gmm_fp8_train, "bf16": gmm_bf16_train})
    from fp8check.kernels.triton.autograd import grouped_linear_bf16, grouped_linear_fp8

    return ExpertMatmuls(family, FAMILY_FRAMEWORKS[family],
                         {"fp8": grouped_linear_fp8, "bf16": grouped_linear_bf16})


def resolve(layers: str | ExpertMatmuls) -> ExpertMatmuls:
    """`layers` itself, or the expert matmuls of the family it names."""
    return layers if isinstance(layers, ExpertMatmuls) else family_matmuls(layers)
