"""fp8check: numerical-accuracy validation for FP8 blockwise grouped-matmul kernels."""

from fp8check import jaxenv

jaxenv.configure()  # before any jax import: see fp8check.jaxenv

__version__ = "0.1.0"
