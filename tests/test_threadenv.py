"""fp8check's import fills in the thread-pool settings (`fp8check.threadenv`) before numpy's
OpenBLAS loads, and keeps a value the user set.  Checked in fresh interpreters, through
the value OpenBLAS itself read (`openblas_thread_timeout`, exported by its library)."""

import json
import os
import subprocess
import sys

import pytest

_PROBE = """
import json, os, sys, ctypes
if sys.argv[1] == "fp8check-first":
    import fp8check
import numpy, threadpoolctl
libs = [i for i in threadpoolctl.threadpool_info() if i["internal_api"] == "openblas"]
lib = ctypes.CDLL(libs[0]["filepath"]) if libs else None
print(json.dumps({"omp": os.environ.get("OMP_WAIT_POLICY"),
                  "timeout": lib.openblas_thread_timeout() if lib else None}))
"""


def _probe(order: str, **env: str) -> dict:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT")}
    done = subprocess.run([sys.executable, "-c", _PROBE, order], env={**clean, **env},
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def _needs_openblas(seen: dict) -> None:
    if seen["timeout"] is None:
        pytest.skip("numpy's BLAS here is not OpenBLAS: no thread timeout to set")


def test_import_sets_openblas_timeout_and_omp_policy():
    seen = _probe("fp8check-first")
    _needs_openblas(seen)
    assert seen == {"omp": "passive", "timeout": 4}
    # without fp8check first, OpenBLAS keeps its default (0: its built-in 2^28 cycles)
    assert _probe("numpy-only")["timeout"] == 0


def test_user_values_are_kept():
    seen = _probe("fp8check-first", OMP_WAIT_POLICY="active", OPENBLAS_THREAD_TIMEOUT="20")
    _needs_openblas(seen)
    assert seen == {"omp": "active", "timeout": 20}
