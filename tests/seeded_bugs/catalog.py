"""Every seeded bug with the suite and the criterion that must catch it, and every correct
variant: the one list `tests/test_seeded_bugs.py` and `benchmarks/detection.py` run.

Each module of seeded bugs exports `BUGS` (name -> `SeededBug`) and may export `CORRECT`
(name -> KernelSpec).
"""

from __future__ import annotations

from fp8check.contracts import KernelSpec
from seeded_bugs import (
    input_writes,
    kernels,
    nonfinite,
    production,
    rounding,
    shapes,
    underflow,
)
from seeded_bugs.catch import SeededBug

_MODULES = (kernels, shapes, underflow, nonfinite, production, input_writes, rounding)

BUGS: dict[str, SeededBug] = {
    name: bug for module in _MODULES for name, bug in module.BUGS.items()
}
CORRECT: dict[str, KernelSpec] = {
    name: spec for module in _MODULES for name, spec in getattr(module, "CORRECT", {}).items()
}


def kernel(name: str) -> KernelSpec:
    """The correct variant or seeded bug named `name`."""
    return CORRECT[name] if name in CORRECT else BUGS[name].spec
