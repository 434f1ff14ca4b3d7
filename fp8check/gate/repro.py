"""The one builder of `fp8check gate` command lines that rerun a result: the gate's
failure lines and JSON `repro`, `fp8check.testing`'s "Reproduce in the gate" line."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from typing import Any

from fp8check.contracts import QUANT_BLOCKS


def parse_block(text: str) -> tuple[int, int]:
    """A quantizer's block as `--block` spells it ("1x128") -> (1, 128); ValueError (one
    line, the valid ones) for any other."""
    valid = {f"{r}x{c}": (r, c) for r, c in QUANT_BLOCKS}
    if text not in valid:
        raise ValueError(f"--block {text!r}: expected one of {', '.join(valid)}")
    return valid[text]


@dataclass(frozen=True)
class PlainDeclarations:
    """What a user's kernel is declared to be on the command line: a plain function's
    (not a KernelSpec's) `--contract`, `--framework`, `--accum`, `--out-dtypes` (comma
    list), `--m-align`, for a quantizer `--recipe`, `--block` ("1x128") and `--fmt`, and
    the backward kernels (`--tgmm`, `--dgrad`: file.py:attr or module:attr) layers 2 and 3
    build its MoE layer with, `--ftz` / `--no-ftz` (flushes_subnormals) and a quantizer's
    `--division-ulps` (its divisions approximate, within that many ulps).  Checked by
    the gate's plan; `declared` turns the first ones
    into KernelSpec fields."""

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

    def for_layer(self, layer: int) -> PlainDeclarations:
        """The declarations a rerun of a `layer` result repeats: the backward kernels only
        for layers 2 and 3, the only ones that run them."""
        return self if layer >= 2 else replace(self, tgmm=None, dgrad=None)

    def arguments(self) -> list[str]:
        """The declarations as gate arguments (only those given)."""
        parts: list[str] = []
        for flag, value in (("--contract", self.contract), ("--framework", self.framework),
                            ("--accum", self.accum), ("--out-dtypes", self.out_dtypes),
                            ("--m-align", self.m_align), ("--recipe", self.recipe),
                            ("--block", self.block), ("--fmt", self.fmt),
                            ("--division-ulps", self.division_ulps), ("--tgmm", self.tgmm),
                            ("--dgrad", self.dgrad)):
            if value is not None:
                parts += [flag, str(value)]
        if self.ftz is not None:
            parts.append("--ftz" if self.ftz else "--no-ftz")
        return parts

    def declared(self) -> dict[str, Any]:
        """The KernelSpec fields these declare (only those given); ValueError for a block
        that is not one."""
        fields: dict[str, Any] = {}
        if self.accum:
            fields["accum"] = self.accum
        if self.out_dtypes:
            fields["out_dtypes"] = tuple(d.strip() for d in self.out_dtypes.split(","))
        if self.m_align is not None:
            fields["m_align"] = self.m_align
        if self.recipe is not None:
            fields["recipe"] = self.recipe
        if self.block is not None:
            fields["block"] = parse_block(self.block)
        if self.fmt is not None:
            fields["fmt"] = self.fmt
        if self.ftz is not None:
            fields["flushes_subnormals"] = self.ftz
        if self.division_ulps is not None:
            fields["division_ulps"] = self.division_ulps
        return fields


def gate_command(kernel: str, layer: int, *, suite: str, seed: int | None = None,
                 profile: str | None = None, backend: str | None = None,
                 case: str | None = None, target: str | None = None,
                 plain: PlainDeclarations | None = None) -> str:
    """The shell command that reruns one result.

    Args:
        kernel: what `--kernel` takes: a built-in name, a family or a module:attr target.
        layer: the result's layer (0-3).
        suite, seed, profile, backend: the run's settings (None: not part of the result's
            identity, e.g. a compile has no seed).
        case: the case id (`--case`), layers 1-3.
        target: layer 0's compile target (`--targets`).
        plain: declarations of a user's kernel, repeated so it loads the same way (the
            backward kernels only for layers 2 and 3).
    """
    parts = ["fp8check", "gate", "--kernel", kernel]
    if plain is not None:
        parts += plain.for_layer(layer).arguments()
    parts += ["--layers", str(layer), "--suite", suite]
    for flag, value in (("--seed", seed), ("--profile", profile), ("--backend", backend),
                        ("--targets", target), ("--case", case)):
        if value is not None:
            parts += [flag, str(value)]
    return shlex.join(parts)
