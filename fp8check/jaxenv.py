"""The process environment jax, XLA:CPU and libtpu need, set before jax starts.

Imported by `fp8check/__init__.py`, so it runs before any of the project's jax code; it
only fills in variables the user has not set, and does nothing on a TPU host (one with
TPU device files), where jax must find the chips.

* ``JAX_PLATFORMS=cpu``: with libtpu installed (the native-compile layer needs it), jax
  otherwise probes for a TPU at start-up (seconds) and takes libtpu's process lock, so two
  processes (pytest workers, the gate's spawned jobs) cannot both start.  Deviceless
  compilation (`jax.experimental.topologies`) still works.
* ``ALLOW_MULTIPLE_LIBTPU_LOAD=1``: `get_topology_desc` loads libtpu, which takes the same
  lock; deviceless compiles in several processes at once are safe (no device is opened).
* ``TPU_WORKER_HOSTNAMES=localhost``, ``TPU_ACCELERATOR_TYPE=v5litepod-4``: silence
  libtpu's start-up errors about a missing worker list and accelerator type on a machine
  that is not a TPU VM (deviceless compiles for every chip are unaffected: tested).
* ``XLA_FLAGS += --xla_cpu_max_isa=AVX`` (interpret-mode fidelity fix ``xla-cpu-no-fma``):
  XLA:CPU contracts the FP8 kernel's scale step ``acc + (P * sa) * sb`` into an FMA in some
  grid structures and not in others (a one-program grid rounds twice, a longer grid
  fuses), so interpret mode would compute two recipes.  Without FMA instructions it
  rounds every operation, which is what the TPU does (its Mosaic LLO shows separate
  ``vmul.f32`` and ``vadd.f32``; `fp8check.targets.tpu`).  Set FP8CHECK_XLA_FMA=1 to keep
  FMA; `kernels.pallas.fidelity` then measures and reports what interpret mode computes.
"""

from __future__ import annotations

import glob
import os

NO_FMA_FLAG = "--xla_cpu_max_isa=AVX"


def tpu_host() -> bool:
    """Whether this machine has TPU device files (a TPU VM: /dev/accel*, /dev/vfio/N)."""
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def no_fma_requested() -> bool:
    """Whether XLA:CPU is asked to run without FMA (the ``xla-cpu-no-fma`` fix)."""
    return NO_FMA_FLAG in os.environ.get("XLA_FLAGS", "").split()


def configure() -> None:
    """Fill in the variables above that the user has not set (module docstring)."""
    if tpu_host():
        return
    for name, value in (("JAX_PLATFORMS", "cpu"), ("ALLOW_MULTIPLE_LIBTPU_LOAD", "1"),
                        ("TPU_WORKER_HOSTNAMES", "localhost"),
                        ("TPU_ACCELERATOR_TYPE", "v5litepod-4")):
        os.environ.setdefault(name, value)
    flags = os.environ.get("XLA_FLAGS", "")
    if os.environ.get("FP8CHECK_XLA_FMA") != "1" and "xla_cpu_max_isa" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {NO_FMA_FLAG}".strip()
