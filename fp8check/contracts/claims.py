"""A kernel's claims: what it declares about its own arithmetic and about the cases it
takes, as one frozen value checked once, when it is made.

`MatmulClaims` are a matmul kernel's (gmm-fp8, gmm, tgmm), `QuantizerClaims` a
quantizer's.  They are declared in one of a few places (a `KernelSpec`, the gate's
command line through `fp8check.gate.declarations`, a `GateCase`, an assert's keywords, a
replay record) and handed unchanged to the criteria that judge the kernel's output
(`fp8check.layers.op.criteria`).  A claim that is none raises `ClaimError`, a one-line
ValueError naming the claim, so that the command line can name its flag instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

from fp8check.contracts.table import CONTRACTS_BY_NAME, Contract
from fp8check.references.gmm import ACCUMS as REFERENCE_ACCUMS
from fp8check.references.gmm import DEFAULT_INTERVAL, INTERVAL_RULE, valid_interval
from fp8check.references.quant import BLOCK, BLOCKS, FP8_FORMATS, RECIPES
from fp8check.references.quant_approx import check_division_ulps

F32_UNIT_ROUNDOFF = 2.0**-24  # float32's unit roundoff: a float32 accumulator's u
OUT_DTYPES = ("f32", "bf16")  # the output dtypes a matmul kernel can return
# The recipes a kernel can follow bit for bit: the reference's, but "exact", which no
# float32 accumulator computes.
ACCUMS = tuple(a for a in REFERENCE_ACCUMS if a != "exact")
QUANT_BLOCKS = BLOCKS  # a quantizer's blocks (rows, columns): the reference's
IN_DTYPES = ("f32", "bf16")  # the dtypes a quantizer's x can have
# The frameworks whose kernels flush float32 subnormals unless they declare otherwise:
# XLA:CPU (which runs jax and interpreted Pallas here) and TPUs flush; numpy's and
# torch's float32 CPU arithmetic, CUDA and compiled Triton keep subnormals.
FLUSHING_FRAMEWORKS = ("jax",)


class ClaimError(ValueError):
    """A claim that is none: `claim` (the field), the `value` given and the `reason`, in
    one line "claim value: reason"."""

    def __init__(self, claim: str, value: Any, reason: str) -> None:
        super().__init__(f"{claim} {value!r}: {reason}")
        self.claim, self.value, self.reason = claim, value, reason


def _check_bool(claim: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ClaimError(claim, value, "must be True or False")


def _check_int(claim: str, value: Any, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ClaimError(claim, value, f"must be an integer >= {low}")


def _check_choice(claim: str, value: Any, choices: Sequence[Any]) -> None:
    if value not in choices:
        raise ClaimError(claim, value, f"expected one of {', '.join(map(str, choices))}")


@dataclass(frozen=True)
class MatmulClaims:
    """What a matmul kernel (gmm-fp8, gmm, tgmm) declares about itself.

    accum: the accumulation recipe it follows bit for bit (one of `ACCUMS`; gmm-fp8
        only).  None: "some valid float32 order", checked against the error bound only.
        A tensor-core recipe ("deepgemm-hopper", "deepgemm-blackwell") declares that
        tensor core as the in-block accumulator (`fp8check.references.mma`): bit-exact to
        its model on every case, the bound widened by its truncation term, bias and
        error_ratio measured against the model.
    acc_unit_roundoff: the unit roundoff of its accumulator, in (0, 1): the error bound's
        u (2^-24, `F32_UNIT_ROUNDOFF`, for float32).
    hopper_interval: with accum "deepgemm-hopper", its promotion interval in K elements
        (Triton's max_num_imprecise_acc: 32, 64 or 128 per tensor-core chain); 128 with
        any other accum.
    flushes_subnormals: it flushes float32 subnormal results to zero and reads subnormal
        inputs as zero (FTZ/DAZ): the bound gains the flush-to-zero term
        (`fp8check.measures.underflow`) and outputs below 2^-126 are not checked precisely (the
        results say so).  None: its framework's default, which `resolved` settles once
        (True for `FLUSHING_FRAMEWORKS`).  torch's CPU bf16 GEMM does flush (AVX512-BF16):
        a torch kernel built on it declares True.
    out_dtypes: the output dtypes it returns (a non-empty subset of `OUT_DTYPES`); the
        gate skips the cases of the others, saying so.
    m_align: every group size (and M) it takes is a multiple of this (>= 1); the gate
        skips the other cases.
    deterministic: two calls on the same inputs give the same bits (the gate checks it).
    """

    accum: str | None = None
    acc_unit_roundoff: float = F32_UNIT_ROUNDOFF
    hopper_interval: int = DEFAULT_INTERVAL
    flushes_subnormals: bool | None = None
    out_dtypes: tuple[str, ...] = OUT_DTYPES
    m_align: int = 1
    deterministic: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.out_dtypes, str):
            raise ClaimError("out_dtypes", self.out_dtypes, "must be a tuple of dtype names")
        object.__setattr__(self, "out_dtypes", tuple(self.out_dtypes))  # a list declared
        if self.accum is not None:
            _check_choice("accum", self.accum, ACCUMS)
        u = self.acc_unit_roundoff
        if isinstance(u, bool) or not isinstance(u, int | float) or not 0.0 < u < 1.0:
            raise ClaimError("acc_unit_roundoff", u, "must be a number in (0, 1)")
        if isinstance(self.hopper_interval, bool) or not valid_interval(
                self.accum, self.hopper_interval):
            raise ClaimError("hopper_interval", self.hopper_interval, INTERVAL_RULE)
        if self.flushes_subnormals is not None:
            _check_bool("flushes_subnormals", self.flushes_subnormals)
        if not self.out_dtypes or any(d not in OUT_DTYPES for d in self.out_dtypes):
            raise ClaimError("out_dtypes", self.out_dtypes,
                             f"must be a non-empty subset of {OUT_DTYPES}")
        _check_int("m_align", self.m_align, 1)
        _check_bool("deterministic", self.deterministic)

    def resolved(self, framework: str | None) -> MatmulClaims:
        """These claims with `flushes_subnormals` settled: None becomes True for a kernel
        of a `FLUSHING_FRAMEWORKS` framework, False for any other, and for no framework
        (None: an assert, handed arrays, not a kernel)."""
        if self.flushes_subnormals is not None:
            return self
        return replace(self, flushes_subnormals=framework in FLUSHING_FRAMEWORKS)

    @property
    def flushes(self) -> bool:
        """`flushes_subnormals`, resolved; ValueError for claims not `resolved` yet."""
        if self.flushes_subnormals is None:
            raise ValueError("flushes_subnormals is not resolved against a framework "
                             "(MatmulClaims.resolved)")
        return self.flushes_subnormals

    def skip_reason(self, out_dtype: str, group_sizes: Sequence[int], m: int) -> str | None:
        """Why a kernel with these claims does not take an [m, ...] problem of
        `group_sizes` with output dtype `out_dtype` (None: it takes it)."""
        if out_dtype not in self.out_dtypes:
            return (f"out dtype {out_dtype} not among the kernel's declared out dtypes "
                    f"{','.join(self.out_dtypes)} (--out-dtypes)")
        if self.m_align > 1 and (m % self.m_align or any(s % self.m_align
                                                         for s in group_sizes)):
            return f"group sizes not multiples of the declared m_align={self.m_align} (--m-align)"
        return None


@dataclass(frozen=True)
class QuantizerClaims:
    """What a quantizer (contract "quantizer") declares about itself.

    recipe: the quantization recipe it computes (one of `fp8check.references.RECIPES`).
    block: its block (rows, columns), one of `QUANT_BLOCKS`.
    fmt: its fp8 format (`fp8check.references.quant.FP8_FORMATS`).
    in_dtype: the dtype of the x it is handed (`IN_DTYPES`): the recipe rounds from it
        (f32 -> bf16 -> fp8 is not f32 -> fp8).
    division_ulps: N > 0: its float32 divisions are approximate (Triton's `/` is
        `div.full.f32`, at most 2 ulps), each within N ulps of the exact quotient; its
        scales are then checked to be within that of the recipe's and its values to be
        the recipe's from its own scales (`fp8check.references.quant_approx`).  0 demands
        the recipe's bits.
    partial_blocks: it takes inputs whose last block is partial (K % 128 != 0); False:
        the gate skips the quantizer-only cases, saying so.
    deterministic: two calls on the same inputs give the same bits (the gate checks it).
    """

    recipe: str
    block: tuple[int, int] = (1, BLOCK)
    fmt: str = "e4m3fn"
    in_dtype: str = "f32"
    division_ulps: int = 0
    partial_blocks: bool = True
    deterministic: bool = True

    def __post_init__(self) -> None:
        _check_choice("recipe", self.recipe, RECIPES)
        try:
            block = (int(self.block[0]), int(self.block[1]))
        except (TypeError, ValueError, IndexError):
            block = None
        if block is None or len(self.block) != 2 or block not in QUANT_BLOCKS:
            raise ClaimError("block", self.block, f"expected one of {QUANT_BLOCKS}")
        object.__setattr__(self, "block", block)  # a list or numpy ints declared
        _check_choice("fmt", self.fmt, FP8_FORMATS)
        _check_choice("in_dtype", self.in_dtype, IN_DTYPES)
        try:
            check_division_ulps(self.recipe, self.division_ulps)
        except ValueError as e:
            raise ClaimError("division_ulps", self.division_ulps, str(e)) from None
        _check_bool("partial_blocks", self.partial_blocks)
        _check_bool("deterministic", self.deterministic)


Claims = MatmulClaims | QuantizerClaims
C = TypeVar("C", bound=Claims)


def _check_names(kind: type, declared: Mapping[str, Any]) -> None:
    """ValueError (one line) naming a key of `declared` that is no claim of `kind`."""
    names = [f.name for f in fields(kind)]
    unknown = sorted(set(declared) - set(names))
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not a claim of {kind.__name__} "
                         f"(its claims: {', '.join(names)})")


def declare(claims: C, declared: Mapping[str, Any]) -> C:
    """`claims` with the claims `declared` by field name replaced (an assert's keywords
    over its `claims` argument); ClaimError for a claim that is none, ValueError for a key
    that is no claim."""
    _check_names(type(claims), declared)
    return replace(claims, **declared)


def claims_for(contract: Contract, declared: Mapping[str, Any]) -> Claims:
    """The claims of a kernel of `contract` that declares the claims `declared` by field
    name, the others left at their defaults (a bare function's declarations on the gate's
    command line).  ValueError for a quantizer without a recipe, a key that is no claim of
    the contract's kind, a claim that is none (ClaimError) or that the contract does not
    take (`check_claims`)."""
    kind = claims_type(contract)
    if kind is QuantizerClaims and "recipe" not in declared:
        raise ValueError("a quantizer must declare its recipe (the gate's --recipe)")
    _check_names(kind, declared)
    claims: Claims = kind(**declared)
    check_claims(contract, claims)
    return claims


def claims_type(contract: Contract) -> type[MatmulClaims] | type[QuantizerClaims]:
    """The claims a kernel of `contract` declares: MatmulClaims for a matmul,
    QuantizerClaims for the quantizer."""
    return MatmulClaims if contract.matmul else QuantizerClaims


def check_claims(contract: Contract, claims: Claims) -> None:
    """ValueError unless `claims` are of `contract`'s kind (`claims_type`); ClaimError for
    an accum on a contract whose operands are not FP8 (`Contract.fp8`)."""
    kind = claims_type(contract)
    if not isinstance(claims, kind):
        raise ValueError(f"a {contract.name} kernel declares {kind.__name__}, not "
                         f"{type(claims).__name__}")
    if isinstance(claims, MatmulClaims) and claims.accum is not None and not contract.fp8:
        fp8 = " or ".join(c.name for c in CONTRACTS_BY_NAME.values() if c.fp8)
        raise ClaimError("accum", claims.accum, f"only meaningful for {fp8} (how FP8 block "
                                                f"partials are summed), not {contract.name}")
