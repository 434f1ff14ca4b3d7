"""The contracts as values: one `Contract` per contract, holding its call (the argument
table), its output, what a case's operands become before the call, and what the gate,
the layers and `fp8check.testing` do with its kernels.

A contract's name ("gmm-fp8", "gmm", "tgmm", "quantizer") is its identity: the one
`KernelSpec.contract`, `--contract`, the JSON documents and `ProblemCache` keys spell.
`contract_of(name)` is the Contract of a name; code that treats the contracts differently
reads a Contract's fields, never compares names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fp8check.contracts.frameworks import NUMPY_DTYPES
from fp8check.references.quant import BLOCK

if TYPE_CHECKING:
    from fp8check.contracts.spec import KernelSpec
    from fp8check.inputs.cases import Case

# The users' documentation of the contracts, relative to the repository root.
CONTRACT_DOC = "docs/contract.md"

# An argument's dtype by name: the framework dtypes' names, and the group sizes' int32.
_ARG_DTYPES: dict[str, np.dtype] = {**NUMPY_DTYPES, "i32": np.dtype(np.int32)}


@dataclass(frozen=True)
class Arg:
    """One argument of a contract's call.

    name: how it is named in messages (an argument the kernel wrote into, `run_kernel`).
    shape: its shape in the problem's sizes "m", "k", "n", "g"; "k/128" ("n/128") is the
        number of 128-wide quantization blocks along K (N).
    dtype: an `_ARG_DTYPES` name ("e4m3fn", "f32", "bf16", "i32"); None: the dtype the
        kernel declares (`KernelSpec.in_dtype`: a quantizer's input).
    replay: the name a `fp8check.testing` replay record stores it under.
    """

    name: str
    shape: tuple[str, ...]
    dtype: str | None
    replay: str


@dataclass(frozen=True)
class Operand:
    """A case operand that a matmul contract's arguments are made from: its `CaseInputs`
    field `source` (x [M,K], w [G,K,N] or dy [M,N], float32) and `block`, the block it is
    quantized in with the case's recipe (the kernel is handed its values and scales);
    None: the kernel is handed it rounded to bf16."""

    source: str
    block: tuple[int, int] | None = None


@dataclass(frozen=True)
class Contract:
    """One kernel contract (for users: `docs/contract.md`).

    name: its identity (module docstring).
    args: its call, in order (`Arg`); a matmul's group sizes come last.
    out: a matmul's output shape in the sizes of `args` (its dtype: the case's output
        dtype, asked for with `out_dtype=` where the kernel takes it, `takes_out_dtype`);
        None: a quantizer, which returns (values, scales) and takes no `out_dtype`.
    operands: what its arguments before the group sizes are made from, in order
        (`Operand`); empty for a quantizer, which is handed the case's x as it is.
    problem: the builder of its layer-1 Problem (the arguments and the references every
        kernel of the contract is compared with on a case), by its key in
        `fp8check.layers.op.problem.PROBLEM_BUILDERS`; None for a quantizer, which
        quantizes the case's operand itself and is compared with the recipe's bits.
    streamed: it has a streamed (production-shape) reference (`fp8check.measures.totals`); a
        streamed case runs the kernels of such contracts only.
    replay: the kind of `fp8check.testing` replay record (`ReplayRecord.kind`) an
        assertion of its output writes.
    layer_variant: the variant of layers 2 and 3 ("fp8", "bf16") a forward kernel of it
        is built into; None: layers 2 and 3 cannot be built around it.
    layer_backward: the backward kernel of the layers 2-3 MoE layer a kernel of it can be
        ("tgmm": the `--tgmm` kernel); None: none.
    """

    name: str
    args: tuple[Arg, ...]
    out: tuple[str, ...] | None
    operands: tuple[Operand, ...]
    problem: str | None
    streamed: bool
    replay: str
    layer_variant: str | None = None
    layer_backward: str | None = None

    @property
    def arg_names(self) -> tuple[str, ...]:
        """Its arguments' names, in call order."""
        return tuple(a.name for a in self.args)

    @property
    def matmul(self) -> bool:
        """A grouped matmul (one output array of the case's output dtype), not a quantizer."""
        return self.out is not None

    @property
    def fp8(self) -> bool:
        """Its operands are quantized to FP8 (`operands`): the contract a kernel declares
        an accumulation recipe for (`MatmulClaims.accum`), and whose compiled kernels layer
        0 checks for the FP8 datapath."""
        return any(o.block is not None for o in self.operands)

    def sizes(self, args: Sequence[Any]) -> dict[str, int]:
        """The problem's sizes ("m", "k", "n", "g") read off `args` (arrays of any
        framework, in call order) through the argument table."""
        found: dict[str, int] = {}
        for arg, a in zip(self.args, args, strict=True):
            for dim, size in zip(arg.shape, a.shape, strict=True):
                if "/" not in dim:
                    found.setdefault(dim, int(size))
        return found

    def group_sizes(self, args: Sequence[Any]) -> np.ndarray:
        """A matmul's group sizes ([G] integers, rows per group) among `args` (in call
        order), found by their name in the argument table."""
        names = self.arg_names
        if "group_sizes" not in names:
            raise ValueError(f"a {self.name} kernel takes no group sizes")
        return np.asarray(args[names.index("group_sizes")])

    def out_shape(self, args: Sequence[Any]) -> tuple[int, ...]:
        """The shape a matmul kernel called on `args` must return (`out`)."""
        if self.out is None:
            raise ValueError(f"a {self.name} kernel returns (values, scales), not one array")
        sizes = self.sizes(args)
        return tuple(sizes[d] for d in self.out)

    def arg_shapes(self, sizes: Mapping[str, int],
                   in_dtype: str | None) -> list[tuple[tuple[int, ...], np.dtype]]:
        """(shape, numpy dtype) of each argument at `sizes` ("m", "k", "n", "g"), an
        argument of the kernel's declared dtype in `in_dtype` (a `NUMPY_DTYPES` name: a
        quantizer's `QuantizerClaims.in_dtype`; None for a matmul, which has none)."""
        def size(dim: str) -> int:
            name, _, block = dim.partition("/")
            return sizes[name] // int(block) if block else sizes[name]

        def dtype(arg: Arg) -> np.dtype:
            name = arg.dtype or in_dtype
            if name is None:
                raise ValueError(f"a {self.name} kernel's {arg.name} has the dtype it "
                                 f"declares: pass in_dtype")
            return _ARG_DTYPES[name]

        return [(tuple(size(d) for d in a.shape), dtype(a)) for a in self.args]

    def skip_reason(self, spec: KernelSpec, case: Case) -> str | None:
        """Why `spec`, a kernel of this contract, does not run on `case` (None: it runs):
        for a matmul, an output dtype or alignment it does not declare
        (`MatmulClaims.skip_reason`); for a quantizer, partial blocks it declares it does
        not take."""
        if self.matmul:
            return spec.matmul_claims.skip_reason(case.out_dtype, case.group_sizes, case.m)
        if spec.quantizer_claims.partial_blocks or not case.quantizer_only:
            return None
        return ("partial quantization blocks (K % 128 != 0), which the quantizer declares it "
                "does not take (QuantizerClaims.partial_blocks=False)")


_GROUP_SIZES = Arg("group_sizes", ("g",), "i32", "group_sizes")

GMM_FP8 = Contract(
    "gmm-fp8",
    args=(Arg("lhs_q", ("m", "k"), "e4m3fn", "lhs_values"),
          Arg("lhs_scale", ("m", "k/128"), "f32", "lhs_scales"),
          Arg("rhs_q", ("g", "k", "n"), "e4m3fn", "rhs_values"),
          Arg("rhs_scale", ("g", "k/128", "n/128"), "f32", "rhs_scales"),
          _GROUP_SIZES),
    out=("m", "n"), operands=(Operand("x", (1, BLOCK)), Operand("w", (BLOCK, BLOCK))),
    problem="gmm_fp8", streamed=True, replay="gmm", layer_variant="fp8")
GMM = Contract(
    "gmm",
    args=(Arg("lhs", ("m", "k"), "bf16", "lhs"), Arg("rhs", ("g", "k", "n"), "bf16", "rhs"),
          _GROUP_SIZES),
    out=("m", "n"), operands=(Operand("x"), Operand("w")),
    problem="unscaled_gmm", streamed=False, replay="gmm", layer_variant="bf16")
TGMM = Contract(
    "tgmm",
    args=(Arg("lhs", ("m", "k"), "bf16", "lhs"), Arg("dy", ("m", "n"), "bf16", "dy"),
          _GROUP_SIZES),
    out=("g", "k", "n"), operands=(Operand("x"), Operand("dy")),
    problem="tgmm", streamed=False, replay="tgmm", layer_backward="tgmm")
QUANTIZER = Contract(
    "quantizer", args=(Arg("x", ("m", "k"), None, "x"),), out=None, operands=(),
    problem=None, streamed=False, replay="quantizer")

CONTRACTS_BY_NAME: dict[str, Contract] = {c.name: c for c in (GMM_FP8, GMM, TGMM, QUANTIZER)}
CONTRACTS = tuple(CONTRACTS_BY_NAME)
# Each contract's arguments by name, as the call passes them (messages name them).
ARG_NAMES = {c.name: c.arg_names for c in CONTRACTS_BY_NAME.values()}
# The forward contracts layers 2 and 3 can build around -> the variant their kernel is.
LAYER_CONTRACTS = {c.name: c.layer_variant for c in CONTRACTS_BY_NAME.values()
                   if c.layer_variant is not None}


def contract_of(name: str) -> Contract:
    """The Contract named `name`; ValueError naming the contracts for an unknown name."""
    try:
        return CONTRACTS_BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown contract {name!r}; expected one of "
                         f"{', '.join(CONTRACTS)}") from None
