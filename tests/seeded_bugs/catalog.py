"""Every seeded bug with the suite and the criterion that must catch it, and every correct
variant: the one list `tests/test_seeded_bugs.py` and `benchmarks/detection.py` run.

Each module of seeded bugs exports `BUGGY` (name -> KernelSpec) and `EXPECTED` (name ->
`Catch`); a correct variant is a KernelSpec in some module's `CORRECT`.
"""

from __future__ import annotations

from dataclasses import dataclass

from fp8check.contracts import KernelSpec
from seeded_bugs import kernels, nonfinite, production, shapes, underflow
from seeded_bugs.catch import Catch


@dataclass(frozen=True)
class SeededBug:
    spec: KernelSpec
    catch: Catch


_MODULES = (kernels, shapes, underflow, nonfinite, production)

BUGS: dict[str, SeededBug] = {
    name: SeededBug(spec, module.EXPECTED[name])
    for module in _MODULES for name, spec in module.BUGGY.items()
}
CORRECT: dict[str, KernelSpec] = {
    name: spec for module in _MODULES for name, spec in getattr(module, "CORRECT", {}).items()
}
