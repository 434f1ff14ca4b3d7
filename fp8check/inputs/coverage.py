"""What a green gate has looked at: the shapes, group patterns and value classes of a suite's
cases, and which of the input classes that real kernels meet (issues 24 and 38) no case
reaches.

Everything is derived from the `Case` fields and group sizes, so a case added to a suite
shows here with no change to this module.  `suite_coverage(cases)` gives a `Coverage`;
`Coverage.facts` (what the cases have) and `Coverage.classes` (each known input class,
covered or not, with the evidence) are what `fp8check list` prints and the HTML report
shows; `case_classes(case)` is one case's classes (their tags), listed beside its id.  A
value class is read from the distribution's name (`VALUE_CLASS_TOKENS`, one table to extend
when a distribution for a new class is added); a distribution the table does not know is
still listed under its own name.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fp8check.contracts import CONTRACTS, contract_of
from fp8check.inputs.cases import RANDOM_PATTERN, Case
from fp8check.references.quant import BLOCK

N_TILE = 256  # the widest N tile a real kernel uses: N % 256 != 0 leaves a partial one
INT16_MAX = 2**15 - 1

# A distribution's name, split at "-", marks a value class when one of its words is here
# (e.g. "nonfinite", "subnormal-sums").  Extend this table when a distribution of a new
# class is added to `fp8check.inputs.testdata.DISTRIBUTIONS`.
NONFINITE = "non-finite inputs"
SUBNORMAL = "float32-subnormal partial sums / outputs"
UE8M0_EDGES = "ue8m0 scale edges (RN(amax/448) on or just above 2^k: the ue8m0 recipes part)"
VALUE_CLASS_TOKENS: dict[str, str] = {
    "nonfinite": NONFINITE,
    "nan": NONFINITE,
    "inf": NONFINITE,
    "subnormal": SUBNORMAL,
    "denormal": SUBNORMAL,
    "ties": "rounding ties",
    "boundary": "quantizer rounding boundaries",
    "ue8m0": UE8M0_EDGES,
}


def value_classes(distribution: str) -> set[str]:
    """The value classes a distribution's name marks (empty for an unmarked one)."""
    words = distribution.lower().split("-")
    return {VALUE_CLASS_TOKENS[w] for w in words if w in VALUE_CLASS_TOKENS}


def k_blocks(case: Case) -> int:
    """K quantization blocks of the case: ceil(K / 128) (the last one partial when
    K % 128 != 0)."""
    return -(-case.k // BLOCK)


def group_end(case: Case) -> int:
    """The row where the last group ends: sum of the group sizes, the largest group
    offset a kernel computes."""
    return sum(case.group_sizes)


def for_matmul(case: Case) -> bool:
    """Whether some matmul contract (not only the quantizer) runs on the case."""
    return any(contract_of(c).matmul for c in case.contracts())


def _pattern_family(pattern: str) -> str:
    """"random3" -> "random" (the seeded draws are one family); other names unchanged."""
    return RANDOM_PATTERN if re.fullmatch(rf"{RANDOM_PATTERN}\d+", pattern) else pattern


@dataclass(frozen=True)
class InputClass:
    """An input class a kernel bug can hide behind: covered when some case reaches it
    (with `matmul`, a case some matmul contract runs on: a quantizer-only case's shape
    says nothing about a matmul's).  `tag` is its short name in the per-case listing."""

    tag: str
    name: str
    reached: Callable[[Case], bool]
    matmul: bool = True

    def covered_by(self, case: Case) -> bool:
        return self.reached(case) and (not self.matmul or for_matmul(case))


# The classes issues 24 and 38 name (and the ones the suites were built around): each is
# marked covered or not from the cases, so a suite that stops reaching one says so.  Row
# alignments: a kernel that pads or vectorises rows by 4, 8 or 16, or tiles them by 64 or
# 128, meets a remainder when M is no multiple of it.
INPUT_CLASSES: tuple[InputClass, ...] = (
    InputClass("odd-k-blocks", "odd K/128 (odd count of K blocks)",
               lambda c: k_blocks(c) % 2 == 1),
    InputClass("k-tail", "K % 128 != 0 (partial last K block, quantizer tail)",
               lambda c: c.k % BLOCK != 0, matmul=False),
    InputClass("n-tail", f"N % {N_TILE} != 0 (partial last {N_TILE}-wide N tile)",
               lambda c: c.n % N_TILE != 0),
    InputClass("m-past-int16", f"M > {INT16_MAX} (row indices past int16)",
               lambda c: c.m > INT16_MAX),
    InputClass("offsets-past-int16", f"group offsets past {INT16_MAX} (int16 offsets overflow)",
               lambda c: group_end(c) > INT16_MAX),
    InputClass("m-unaligned", "M % 4 != 0 (M no multiple of 4, 8, 16, 64 or 128 rows)",
               lambda c: c.m % 4 != 0),
    InputClass("m-4-not-8", "M % 8 == 4 (rows 4-aligned, but no multiple of 8, 16, 64, 128)",
               lambda c: c.m % 8 == 4),
    InputClass("m-tile-remainder", f"M > {BLOCK}, M % {BLOCK} != 0 (whole row tiles, then a "
               "partial one)", lambda c: c.m > BLOCK and c.m % BLOCK != 0),
    InputClass("m-whole-tiles", f"M % {BLOCK} == 0 (whole row tiles, no remainder)",
               lambda c: c.m % BLOCK == 0),
    InputClass("small-m-many-groups", f"small M, many groups (M < {BLOCK}, under 8 rows per "
               "group)", lambda c: c.m < BLOCK and c.m < 8 * c.g),
    InputClass("empty-groups", "zero-size groups", lambda c: 0 in c.group_sizes),
    InputClass("residual-rows", "residual rows (a group size not a multiple of 128)",
               lambda c: any(s % BLOCK for s in c.group_sizes)),
    InputClass("rows-past-end", "rows past the last group", lambda c: group_end(c) < c.m),
    InputClass("bf16-out", "bf16 output", lambda c: c.out_dtype == "bf16"),
    InputClass("exact-bf16", "exact partials on bf16 output (rounding direction bit for bit)",
               lambda c: c.exact_partials and c.out_dtype == "bf16"),
    InputClass("nonfinite", NONFINITE, lambda c: NONFINITE in value_classes(c.distribution),
               matmul=False),
    InputClass("subnormal", SUBNORMAL, lambda c: SUBNORMAL in value_classes(c.distribution)),
    InputClass("ue8m0-edges", UE8M0_EDGES,
               lambda c: UE8M0_EDGES in value_classes(c.distribution), matmul=False),
)


def case_classes(case: Case) -> list[str]:
    """The tags of the INPUT_CLASSES `case` reaches, in their order."""
    return [ic.tag for ic in INPUT_CLASSES if ic.covered_by(case)]


@dataclass(frozen=True)
class Coverage:
    """What a suite's cases look at.

    `facts`: (what, the values the cases take) rows, in a fixed order.
    `classes`: (input class, covered, ids of the cases that reach it) for every entry of
    `INPUT_CLASSES`, in that order.
    """

    n_cases: int
    facts: tuple[tuple[str, str], ...]
    classes: tuple[tuple[str, bool, tuple[str, ...]], ...]

    @property
    def not_covered(self) -> list[str]:
        return [name for name, covered, _ in self.classes if not covered]


def _values(values: Sequence[Any]) -> str:
    """Sorted distinct values (all of one type), comma-separated ("-" when none)."""
    return ", ".join(map(str, sorted(set(values)))) or "-"


def _counted(values: Sequence[str]) -> str:
    """Distinct values in first-seen order, each with its case count: "normal ×3"."""
    counts: dict[str, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return ", ".join(f"{v} ×{n}" for v, n in counts.items()) or "-"


def _contracts(cases: Sequence[Case]) -> str:
    """Which contracts the cases apply to (`Case.contracts`), with their case counts."""
    return _counted(["every contract" if set(cs) == set(CONTRACTS) else ", ".join(cs)
                     for cs in (c.contracts() for c in cases)])


def _flag_counts(cases: Sequence[Case]) -> list[tuple[str, str]]:
    """("cases exact_partials", count) for every boolean field of Case: a flag added to
    Case (a case family) shows with no change here."""
    flags = dict.fromkeys(f.name for c in cases for f in dataclasses.fields(c)
                          if f.type in (bool, "bool"))
    return [(f"cases {name}", str(sum(bool(getattr(c, name, False)) for c in cases)))
            for name in flags]


def suite_coverage(cases: Sequence[Case]) -> Coverage:
    """The coverage of `cases` (a suite from `fp8check.inputs.cases.build_suite`, or a part)."""
    kn = {a: [f"{c.k}x{c.n}" for c in cases if c.aspect == a]
          for a in dict.fromkeys(c.aspect for c in cases)}
    kb = [k_blocks(c) for c in cases]
    residues = {s % BLOCK for c in cases for s in c.group_sizes if s % BLOCK}
    ends = [group_end(c) for c in cases]
    facts = [
        ("cases", str(len(cases))),
        ("M", _values([c.m for c in cases])),
        *((f"K x N ({a})", _values(v)) for a, v in kn.items()),
        ("K blocks (K/128)", _values(kb)),
        ("K-block parity", _values(["odd" if b % 2 else "even" for b in kb])),
        ("K % 128", _values([c.k % BLOCK for c in cases])),
        (f"N % {N_TILE}", _values([c.n % N_TILE for c in cases])),
        ("N tiles of 128", _values([-(-c.n // BLOCK) for c in cases])),
        ("G", _values([c.g for c in cases])),
        ("group patterns", _counted([_pattern_family(c.pattern) for c in cases])),
        ("cases with zero-size groups", str(sum(0 in c.group_sizes for c in cases))),
        ("distinct row residues mod 128",
         f"{len(residues)} of 127" + (f" ({min(residues)}..{max(residues)})" if residues else "")),
        ("cases with rows past the last group",
         str(sum(e < c.m for e, c in zip(ends, cases, strict=True)))),
        ("max group end row (offset)", str(max(ends, default=0))),
        (f"group offsets past {INT16_MAX}", "yes" if any(e > INT16_MAX for e in ends) else "no"),
        ("distributions", _counted([c.distribution for c in cases])),
        ("value classes", _values([v for c in cases for v in value_classes(c.distribution)])),
        *_flag_counts(cases),
        ("recipes", _counted([c.recipe for c in cases])),
        ("out dtypes", _counted([c.out_dtype for c in cases])),
        ("contracts", _contracts(cases)),
    ]
    classes = tuple(
        (ic.name, bool(hits), hits)
        for ic in INPUT_CLASSES
        for hits in [tuple(c.id for c in cases if ic.covered_by(c))]
    )
    return Coverage(n_cases=len(cases), facts=tuple(facts), classes=classes)


def coverage_lines(cov: Coverage, indent: str = "  ") -> list[str]:
    """The coverage as plain text lines: the facts, then the classes covered and not."""
    width = max(len(what) for what, _ in cov.facts)
    lines = [f"{indent}{what:<{width}}  {values}" for what, values in cov.facts]
    tags = {ic.name: ic.tag for ic in INPUT_CLASSES}
    lines.append(f"{indent}input classes reached (cases) [tag in the case list]:")
    lines += [f"{indent}  covered      {name} ({len(hits)}) [{tags[name]}]"
              for name, covered, hits in cov.classes if covered]
    lines.append(f"{indent}NOT looked at:")
    lines += [f"{indent}  not covered  {name} [{tags[name]}]" for name in cov.not_covered] or [
        f"{indent}  (every listed class is covered)"]
    return lines
