"""The accumulator a matmul kernel declares, as the layer-1 bound and criteria use it: one
model per kind of accumulator (a float32 one, or an FP8 tensor core's), looked up by the
declared accumulation recipe (`AccumulatorModel.of`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fp8check.contracts import MatmulClaims
from fp8check.references.gmm import DEFAULT_INTERVAL, TENSOR_CORE_ACCUMS


@dataclass(frozen=True)
class AccumulatorModel:
    """What the criteria expect of a kernel that declares accumulation recipe `recipe`.

    recipe: a `references.gmm` recipe ("deepgemm", "cublas", ...); None: none declared.
    unit_roundoff: the accumulator's unit roundoff u in the error bound (2^-24: float32).
    tensor_core: the CUDA target whose FP8 tensor core forms the recipe's block partials
        (`references.gmm.TENSOR_CORE_ACCUMS`, modelled by `references.mma`), None for a
        float32 accumulator.  A tensor core's truncation is the hardware's, not a bug: the
        bound gains its truncation term (`references.hopper_bound.truncation_term`), the
        recipe's output (the model) is what error_ratio and the bias tests compare the
        kernel with (instead of the naive kernel and RN(exact)), and it is checked bit for
        bit on every case.  A float32 recipe is checked bit for bit only where every
        partial is exact in float32 (`Problem.exact_partials`).
    interval: the tensor core's promotion interval in K elements (128 otherwise).
    """

    recipe: str | None
    unit_roundoff: float
    tensor_core: str | None
    interval: int

    @classmethod
    def of(cls, claims: MatmulClaims) -> AccumulatorModel:
        """The model of a kernel with these claims: its accumulation recipe (None: none
        declared), its accumulator's unit roundoff and, for a tensor-core recipe, its
        promotion interval."""
        accum = claims.accum
        target = TENSOR_CORE_ACCUMS.get(accum) if accum is not None else None
        return cls(accum, claims.acc_unit_roundoff, target,
                   claims.hopper_interval if target is not None else DEFAULT_INTERVAL)

    @property
    def against_model(self) -> bool:
        """The kernel is expected to compute the recipe's output (a tensor core's
        truncation included), not RN(exact) up to the bound."""
        return self.tensor_core is not None

    def bit_exact(self, exact_partials: bool) -> bool:
        """bit_exact applies: a declared recipe that is a hardware model, or a float32
        recipe on a case whose partials are exact in float32."""
        return self.recipe is not None and (exact_partials or self.against_model)

    def declared(self) -> dict[str, Any]:
        """The declarations a result's metrics record: a tensor core's promotion interval."""
        return {"hopper_interval": self.interval} if self.against_model else {}
