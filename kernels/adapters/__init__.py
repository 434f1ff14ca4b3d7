"""Third-party kernels wrapped in fp8check contracts."""
