"""`fp8check list`: the built-in kernels, the kernel families, the case ids of a suite with
the input classes each reaches, and the suite's coverage (`fp8check.inputs.coverage`: what a green
gate on it has and has not looked at)."""

from __future__ import annotations

import argparse

from fp8check import registry
from fp8check.inputs import cases as cases_mod
from fp8check.inputs import coverage


def register(subparsers: argparse._SubParsersAction) -> None:
    ls = subparsers.add_parser("list", help="list built-in kernels, kernel families and the "
                                                "case ids of a suite with what they cover")
    ls.add_argument("--suite", choices=cases_mod.SUITES, default="ci")
    ls.add_argument("--seed", type=int, default=0)
    ls.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print("built-in kernels:")
    for name, target in registry.BUILTIN_KERNELS.items():
        print(f"  {name:20s} {target}")
    print("kernel families (--kernel FAMILY: its built-in kernels; layers 0, 2 and 3):")
    for family in registry.FAMILIES:
        print(f"  {family:20s} {', '.join(registry.family_kernels(family))}")
    print(f"cases of suite {args.suite} (seed {args.seed}):")
    cases = cases_mod.build_suite(args.suite, args.seed)
    for case in cases:
        print(f"  {case.id}  {_groups(case)}{_only(case)}  covers: "
              f"{', '.join(coverage.case_classes(case)) or '-'}")
    print(f"what suite {args.suite} looks at (a green gate on it has seen only this):")
    print("\n".join(coverage.coverage_lines(coverage.suite_coverage(cases))))
    return 0


def _groups(case: cases_mod.Case) -> str:
    """The case's group sizes, summarised past 32 groups (production cases have 256)."""
    gs = case.group_sizes
    if len(gs) <= 32:
        return f"groups={list(gs)}"
    return f"groups: {len(gs)} ({sum(gs)} rows, {gs.count(0)} empty, largest {max(gs)})"


def _only(case: cases_mod.Case) -> str:
    """Which contracts run the case, when not all of them."""
    if case.quantizer_only:
        return "  quantizer only (K % 128 != 0)"
    if case.streamed:
        return "  gmm-fp8 only (streamed production shape)"
    return ""
