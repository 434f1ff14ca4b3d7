"""fp8check: numerical-accuracy validation for FP8 blockwise grouped-matmul kernels."""

__version__ = "0.1.0"
