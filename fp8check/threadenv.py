"""The thread-pool environment the references need, set before the pools start.

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
* ``OPENBLAS_THREAD_TIMEOUT=4``: the same for OpenBLAS's own threads (numpy's BLAS), which
  spin 2^28 cycles (about 0.1 s) after each call by default; 4 is OpenBLAS's smallest
  value, 2^4 cycles.  The production check alternates a BLAS product (|A||B|) with the
  VNNI threads' partials and numba's accumulation group by group; with the default
  spinning, the spinning BLAS thread took a core from each: the wi check took 5.7-6.0 s,
  and 4.3-4.5 s with 4 (the partials 1.7 -> 1.1 s, the exact accumulation 0.74 -> 0.36 s).
  OpenBLAS reads it once, when it loads: it applies when fp8check is imported before
  numpy (the CLI, the pytest plugin, `benchmarks/`), else set it in the environment.
"""

from __future__ import annotations

import os


def configure() -> None:
    """Fill in OMP_WAIT_POLICY=passive and OPENBLAS_THREAD_TIMEOUT=4 unless the process
    environment sets them."""
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
