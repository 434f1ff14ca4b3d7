"""`Catch`, `SeededBug` and `seeded`: what each seeded-bug module exports and how."""

from __future__ import annotations

from dataclasses import dataclass

from fp8check.contracts import KernelSpec


@dataclass(frozen=True)
class Catch:
    """A seeded bug must fail `suite` (seed 0 in the tests, every seed the detection
    benchmark tries) with `criterion` among the failed criteria of some case."""

    suite: str
    criterion: str


@dataclass(frozen=True)
class SeededBug:
    """A kernel with one realistic bug, and where the gate must catch it."""

    spec: KernelSpec
    catch: Catch


def seeded(*bugs: tuple[KernelSpec, Catch]) -> dict[str, SeededBug]:
    """Each (kernel, catch) pair as a SeededBug, keyed by the kernel's name."""
    return {s.name: SeededBug(s, c) for s, c in bugs}


def named(*specs: KernelSpec) -> dict[str, KernelSpec]:
    """Kernels keyed by name (a module's correct variants)."""
    return {s.name: s for s in specs}
