"""FP8 grouped-GEMM Triton kernels for Hopper and Blackwell (padding-free and padded),
quantizer, backward, and their autograd compositions.  Each gate kernel's KernelSpec
factory sits beside it (`gmm.fp8_spec`, `gmm.fp8_hopper_spec`, `gmm.fp8_blackwell_spec`,
`padding.fp8_padded_spec`, `backward.tgmm_spec`, `quantize.quantizer_spec`).

Backend selection happens here, before anything imports triton: when torch has no CUDA
device and the caller has not chosen, ``TRITON_INTERPRET=1`` is set so the kernels run in
Triton's interpreter on CPU torch tensors.  Set ``TRITON_INTERPRET=0`` yourself (before
the first triton import) to force compiled kernels.  In interpret mode every public kernel
first calls `fidelity.probe_fidelity()` (self-test, fix, record); see `interpret`.
Nothing on the CPU path imports a CUDA-only module.  Import this package before triton
(or set TRITON_INTERPRET yourself): triton reads the variable when it is first imported.
"""

import os
import sys

import torch

if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    if "triton" in sys.modules:
        # triton.language's own @jit functions (tl.sum, tl.max, ...) were already built
        # for compilation; interpreted kernels calling them would fail obscurely later.
        raise ImportError("fp8check.kernels.triton: triton was imported before interpret mode "
                          "was chosen; import this package first or set TRITON_INTERPRET=1")
    os.environ["TRITON_INTERPRET"] = "1"

from .autograd import grouped_linear_bf16, grouped_linear_fp8  # noqa: E402
from .backward import dgrad, tgmm  # noqa: E402
from .fidelity import FidelityRecord, probe_fidelity, self_test  # noqa: E402
from .gmm import gmm_fp8  # noqa: E402
from .padding import gmm_fp8_padded, padding_overhead  # noqa: E402
from .quantize import quantize_fp8  # noqa: E402

__all__ = [
    "FidelityRecord",
    "dgrad",
    "gmm_fp8",
    "gmm_fp8_padded",
    "grouped_linear_bf16",
    "grouped_linear_fp8",
    "padding_overhead",
    "probe_fidelity",
    "quantize_fp8",
    "self_test",
    "tgmm",
]
