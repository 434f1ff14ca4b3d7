"""Kernels under test: pallas/ (JAX), triton/ (PyTorch), adapters/ (third-party)."""
