"""The thread-pool environment the references need, set before numba's OpenMP starts.

Imported by `fp8check/__init__.py`; it only fills in variables the user has not set.

* ``OMP_WAIT_POLICY=passive``: numba's OpenMP threads (its default threading layer where
  libgomp is found) spin for a while after every parallel region, and OpenBLAS's threads
  spin after every BLAS call.  The exact references alternate the two (BLAS products,
  numba splits and corrections), so on a machine with few cores each pool's spinning
  threads took the cores the other pool needed: the exact tgmm at the dev shape ran in
  668-837 ms with spinning and 298 ms with passive waiting on 2 cores
  (`benchmarks/reference.py`).  Passive threads sleep at once; waking them costs
  microseconds per parallel region, which the references' regions dwarf.  It applies to
  any OpenMP runtime that loads after fp8check (torch's too); one loaded earlier keeps its
  policy.
"""

from __future__ import annotations

import os


def configure() -> None:
    """Fill in OMP_WAIT_POLICY=passive unless the process environment sets it."""
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
