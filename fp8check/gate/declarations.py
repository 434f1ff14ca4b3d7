"""What a user's bare function is declared to be on the gate's command line
(`BareDeclarations`), and the one table between the command line's claim flags and the
fields of the claims (`CLAIM_FLAGS`, `fp8check.contracts.claims`): the flags are parsed
into claims here, and claims are written back as flags here (a repro line)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

from fp8check.contracts import (
    QUANT_BLOCKS,
    ClaimError,
    Claims,
    Contract,
    MatmulClaims,
    claims_for,
    claims_type,
)


def parse_block(text: str) -> tuple[int, int]:
    """A quantizer's block as `--block` spells it ("1x128") -> (1, 128); ValueError (one
    line, the valid ones) for any other."""
    valid = {f"{r}x{c}": (r, c) for r, c in QUANT_BLOCKS}
    if text not in valid:
        raise ValueError(f"--block {text!r}: expected one of {', '.join(valid)}")
    return valid[text]


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class ClaimFlag:
    """A gate flag that declares one claim of a bare function.

    flag: the option ("--out-dtypes"; for a boolean its positive spelling, "--ftz", whose
        negation is "--no-ftz"); dest: the `BareDeclarations` field (and argparse dest)
        that holds its value as given; claim: the claims field it declares; parse: the
        value as given -> the claim's value (ValueError, one line); text: the claim's
        value -> the value as given (what a repro line repeats).
    """

    flag: str
    dest: str
    claim: str
    parse: Callable[[Any], Any] = _same
    text: Callable[[Any], Any] = _same


CLAIM_FLAGS = (
    ClaimFlag("--accum", "accum", "accum"),
    ClaimFlag("--out-dtypes", "out_dtypes", "out_dtypes",
              parse=lambda v: tuple(d.strip() for d in v.split(",")), text=",".join),
    ClaimFlag("--m-align", "m_align", "m_align"),
    ClaimFlag("--hopper-interval", "hopper_interval", "hopper_interval"),
    ClaimFlag("--recipe", "recipe", "recipe"),
    ClaimFlag("--block", "block", "block", parse=parse_block,
              text=lambda b: f"{b[0]}x{b[1]}"),
    ClaimFlag("--fmt", "fmt", "fmt"),
    ClaimFlag("--division-ulps", "division_ulps", "division_ulps"),
    ClaimFlag("--ftz", "ftz", "flushes_subnormals"),
)
_BY_CLAIM = {f.claim: f for f in CLAIM_FLAGS}


@dataclass(frozen=True)
class BareDeclarations:
    """What a user's kernel is declared to be on the command line: a bare function's
    (not a KernelSpec's) `--contract` and `--framework`, its claims as the flags of
    `CLAIM_FLAGS` gave them (None: not given; `--ftz` / `--no-ftz`: True / False), and the
    backward kernels (`--tgmm`, `--dgrad`: file.py:attr or module:attr) layers 2 and 3
    build its MoE layer with.  Checked by the gate's plan (`claims`); `declared` gives
    the claims by field name."""

    contract: str | None = None
    framework: str | None = None
    accum: str | None = None
    out_dtypes: str | None = None
    m_align: int | None = None
    recipe: str | None = None
    block: str | None = None
    fmt: str | None = None
    tgmm: str | None = None
    dgrad: str | None = None
    ftz: bool | None = None
    division_ulps: int | None = None
    hopper_interval: int | None = None

    @classmethod
    def of(cls, contract: str, framework: str, claims: MatmulClaims) -> BareDeclarations:
        """The declarations of a bare matmul function of `contract` and `framework` with
        `claims`: the flag of each claim that differs from its default (for the
        framework), and only those (a repro line)."""
        default = MatmulClaims().resolved(framework)
        given = {f.dest: f.text(getattr(claims, f.claim)) for f in CLAIM_FLAGS
                 if hasattr(default, f.claim)
                 and getattr(claims, f.claim) != getattr(default, f.claim)}
        return cls(contract=contract, framework=framework, **given)

    def for_layer(self, layer: int) -> BareDeclarations:
        """The declarations a rerun of a `layer` result repeats: the backward kernels only
        for layers 2 and 3, the only ones that run them."""
        return self if layer >= 2 else replace(self, tgmm=None, dgrad=None)

    def arguments(self) -> list[str]:
        """The declarations as gate arguments (only those given)."""
        parts: list[str] = []
        for flag, value in (("--contract", self.contract), ("--framework", self.framework)):
            if value is not None:
                parts += [flag, value]
        for f in CLAIM_FLAGS:
            value = getattr(self, f.dest)
            if isinstance(value, bool):
                parts.append(f.flag if value else f"--no-{f.flag[2:]}")
            elif value is not None:
                parts += [f.flag, str(value)]
        for flag, value in (("--tgmm", self.tgmm), ("--dgrad", self.dgrad)):
            if value is not None:
                parts += [flag, value]
        return parts

    def declared(self) -> dict[str, Any]:
        """The claims these declare, by claims field name (only those given); ValueError
        (one line, naming the flag) for a value a flag cannot parse."""
        return {f.claim: f.parse(getattr(self, f.dest)) for f in CLAIM_FLAGS
                if getattr(self, f.dest) is not None}

    def claims(self, contract: Contract) -> Claims:
        """The claims of a bare function of `contract` these declare (`claims_for`);
        ValueError (one line) naming the flags that declare claims a kernel of `contract`
        does not have, or the flag of a claim that is none."""
        declared = self.declared()
        kind = claims_type(contract)
        names = {f.name for f in fields(kind)}
        foreign = [_BY_CLAIM[c].flag for c in declared if c not in names]
        if foreign:
            needs = ("a quantizer: they need --contract quantizer" if contract.matmul else
                     f"a matmul kernel, not a {contract.name}")
            raise ValueError(f"{', '.join(foreign)} declare {needs}")
        try:
            return claims_for(contract, declared)
        except ClaimError as e:
            f = _BY_CLAIM[e.claim]
            raise ValueError(f"{f.flag} {getattr(self, f.dest)!r}: {e.reason}") from e
