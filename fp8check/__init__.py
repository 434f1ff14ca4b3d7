"""fp8check: numerical-accuracy validation for FP8 blockwise grouped-matmul kernels."""

from fp8check import jaxenv, threadenv

jaxenv.configure()  # before any jax import: see fp8check.jaxenv
threadenv.configure()  # before numba's OpenMP starts: see fp8check.threadenv

__version__ = "0.1.0"
