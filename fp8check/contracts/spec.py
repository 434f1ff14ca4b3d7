"""`KernelSpec`: a kernel under test (what it is, how to run and compile it) and its
claims (`fp8check.contracts.claims`), checked against its contract
(`fp8check.contracts.table`) when it is made."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fp8check.contracts.claims import Claims, MatmulClaims, QuantizerClaims, check_claims
from fp8check.contracts.frameworks import FRAMEWORKS
from fp8check.contracts.table import contract_of


@dataclass(frozen=True)
class KernelSpec:
    """A kernel under test: what it is and how to run and compile it, and its `claims`.

    name: its name in the results (non-empty).
    contract: its contract's name (`fp8check.contracts.table`); framework: one of
        `FRAMEWORKS`; fn: the callable the contract calls.
    claims: what it declares about itself: `MatmulClaims` for a matmul contract (default:
        `MatmulClaims()`, "some valid float32 order"), `QuantizerClaims` for a quantizer
        (required: its recipe).  Checked against the contract and resolved against the
        framework once, here (`MatmulClaims.resolved`: the framework's flush-to-zero
        default): every reader sees the claims the kernel is judged by.
    backend: where it actually runs ("cpu", "interpret", "native"); fidelity_fixes: the
        interpreter fixes that were active (recorded in the results).
    description, tags: what the listings and reports show of it.
    native_fn: for a JAX kernel whose `fn` runs Pallas in interpret mode, the same kernel
        compiled natively (interpret=False); gate layer 0 compiles it for the TPU chips
        (default: `fn` itself, which for an interpret-mode Pallas kernel is plain XLA, with
        no Mosaic kernel to inspect: the results then show `llo_missing`).
    cuda_jobs: for a Triton kernel, (m, k, n, g) -> the `fp8check.targets.cuda.CudaJob`s
        (its @triton.jit function, signature, constexprs, num_warps) its launch compiles at
        that problem; gate layer 0 compiles them for sm_90a.  A JAX kernel needs nothing:
        layer 0 compiles `fn` itself for the TPU chips.  Without it a torch kernel's layer 0
        is skipped, saying why.
    """

    name: str
    contract: str
    framework: str
    fn: Callable[..., Any]
    claims: Claims = MatmulClaims()
    backend: str = "cpu"
    fidelity_fixes: tuple[str, ...] = ()
    description: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)
    native_fn: Callable[..., Any] | None = None
    cuda_jobs: Callable[[int, int, int, int], Sequence[Any]] | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("KernelSpec: name must be non-empty")
        try:
            contract = contract_of(self.contract)
        except ValueError as e:
            raise ValueError(f"kernel {self.name!r}: {e}") from None
        if self.framework not in FRAMEWORKS:
            raise ValueError(
                f"kernel {self.name!r}: unknown framework {self.framework!r}; "
                f"expected one of {', '.join(FRAMEWORKS)}"
            )
        if not callable(self.fn):
            raise ValueError(f"kernel {self.name!r}: fn is not callable")
        try:
            check_claims(contract, self.claims)
        except ValueError as e:
            raise ValueError(f"kernel {self.name!r}: {e}") from None
        if isinstance(self.claims, MatmulClaims):  # frozen: resolved once, here
            object.__setattr__(self, "claims", self.claims.resolved(self.framework))

    @property
    def matmul_claims(self) -> MatmulClaims:
        """The claims of a matmul kernel; ValueError for a quantizer."""
        if not isinstance(self.claims, MatmulClaims):
            raise ValueError(f"kernel {self.name!r} is a {self.contract}: it has "
                             f"{type(self.claims).__name__}")
        return self.claims

    @property
    def quantizer_claims(self) -> QuantizerClaims:
        """The claims of a quantizer; ValueError for a matmul kernel."""
        if not isinstance(self.claims, QuantizerClaims):
            raise ValueError(f"kernel {self.name!r} is a {self.contract}: it has "
                             f"{type(self.claims).__name__}")
        return self.claims
