"""fp8check: numerical-accuracy validation for FP8 blockwise grouped-matmul kernels."""

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

from fp8check import jaxenv, threadenv

jaxenv.configure()  # before any jax import: see fp8check.jaxenv
threadenv.configure()  # before numba's OpenMP starts: see fp8check.threadenv

__version__ = "0.1.0"

# Modules that moved into the floors (docs/architecture.md) keep their earlier import
# names: `import fp8check.strategies` is the module `fp8check.inputs.strategies` itself.
MOVED = {
    "fp8check.cases": "fp8check.inputs.cases",
    "fp8check.coverage": "fp8check.inputs.coverage",
    "fp8check.hypothesis_profiles": "fp8check.inputs.hypothesis_profiles",
    "fp8check.nonfinite_inputs": "fp8check.inputs.nonfinite",
    "fp8check.strategies": "fp8check.inputs.strategies",
    "fp8check.subnormal_data": "fp8check.inputs.subnormal",
    "fp8check.testdata": "fp8check.inputs.testdata",
    "fp8check.curves": "fp8check.measures.curves",
    "fp8check.integrity": "fp8check.measures.integrity",
    "fp8check.metrics": "fp8check.measures.metrics",
    "fp8check.overflow": "fp8check.measures.overflow",
    "fp8check.totals": "fp8check.measures.totals",
    "fp8check.underflow": "fp8check.measures.underflow",
}


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves an earlier name in `MOVED` to the module at its new place (one module
    object under both names, so state and monkeypatching are shared)."""

    def find_spec(self, name: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(name, self) if name in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the module was executed under its new name."""


sys.meta_path.insert(0, _MovedFinder())
